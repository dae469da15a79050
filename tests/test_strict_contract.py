"""The contract's types hold at run time what they say to a type checker (issue 23, "types that strict code can use").

Every ``Literal`` field of a record is checked when the record is made; ``TaskFamily.in_folder``
takes the record's fields by name; a rule declares ``arm_alpha`` and ``plan`` on its record, and
``stats bounds``, ``plan`` and ``selfcheck`` say what they use; every type a reporter reads in a
``Report`` is exported by the author API. (tests/test_hookspec_examples.py type-checks the docs'
examples with ``mypy --strict``.)
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import typing
from pathlib import Path

import attrs
import pytest
from certlab_rule_support import stats_cmd

import certlab_core.plugin as api
from certlab_core.cli import main
from certlab_core.plugin import Bounds, StatisticalRule, TaskFamily, UsageError
from certlab_core.plugin.types.rule import ArmAlpha

ROOT = Path(__file__).resolve().parent.parent


CONTRACT_MODULES = [
    importlib.import_module(info.name) for info in pkgutil.walk_packages(api.__path__, f"{api.__name__}.")
]
#: Every public name of the contract's modules: what a record's string annotations may name.
CONTRACT_NAMES = {k: v for m in CONTRACT_MODULES for k, v in vars(m).items() if not k.startswith("_")}


def _record_types() -> list[tuple[type, dict[str, object]]]:
    """Every attrs class defined in a module of ``certlab_core.plugin`` (its ``types`` too), with its field types."""
    found = []
    for module in CONTRACT_MODULES:
        for value in vars(module).values():
            if isinstance(value, type) and attrs.has(value) and value.__module__ == module.__name__:
                found.append((value, typing.get_type_hints(value, {**CONTRACT_NAMES, **vars(module)})))
    return found


def _literal_words(hint: object) -> tuple[str, ...]:
    if typing.get_origin(hint) is typing.Literal:
        return typing.get_args(hint)
    return tuple(word for arg in typing.get_args(hint) for word in _literal_words(arg))


LITERAL_FIELDS = [
    (cls, field, _literal_words(hints[field.name]))
    for cls, hints in _record_types()
    for field in attrs.fields(cls)
    if _literal_words(hints.get(field.name))
]


def test_the_contract_has_literal_fields_to_check() -> None:
    names = {f"{cls.__name__}.{field.name}" for cls, field, _ in LITERAL_FIELDS}
    assert {"AgentOutcome.status", "Bounds.verdict", "CalibrationExpectation.verdict", "Fault.target"} <= names


@pytest.mark.parametrize(
    ("cls", "field", "words"), LITERAL_FIELDS, ids=[f"{c.__name__}.{f.name}" for c, f, _ in LITERAL_FIELDS]
)
def test_every_literal_field_is_checked_when_the_record_is_made(
    cls: type, field: attrs.Attribute[object], words: tuple[str, ...]
) -> None:
    assert field.validator is not None, f"{cls.__name__}.{field.name} takes any word"
    with pytest.raises(ValueError) as refused:
        field.validator(object.__new__(cls), field, "no-such-word")
    message = str(refused.value)
    assert message.startswith(f"{cls.__name__}.{field.name} must be one of ")
    assert all(word in message for word in words) and "'no-such-word'" in message
    for word in words:
        field.validator(object.__new__(cls), field, word)


def test_a_wrong_word_is_one_value_error_naming_the_field_and_the_words() -> None:
    with pytest.raises(ValueError) as refused:
        Bounds(lower=0.0, upper=0.1, verdict="pass")  # type: ignore[arg-type]
    assert str(refused.value) == "Bounds.verdict must be one of PASS, BLOCK, INCONCLUSIVE; got 'pass'"
    with pytest.raises(ValueError, match=r"^AgentOutcome\.status must be one of completed, timeout"):
        api.AgentOutcome(status="done")  # type: ignore[arg-type]


def test_in_folder_takes_the_records_own_fields_by_name(tmp_path: Path) -> None:
    parameters = inspect.signature(TaskFamily.in_folder).parameters
    assert all(p.kind is not inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    laid_out = {"tree_dir", "prompt_file", "cases_file"}
    assert set(parameters) - {"folder"} == {f.name for f in attrs.fields(TaskFamily)} - laid_out
    family = TaskFamily.in_folder(
        tmp_path,
        name="sign",
        version="1.0",
        description="d",
        allowed_paths=["sign.py"],
        test_paths=["tests"],
        module_names=["sign"],
        defects=[],
        mutation_threshold=0.5,
    )
    assert family.tree_dir == str(tmp_path / "tree") and family.mutation_threshold == 0.5
    with pytest.raises(TypeError, match="descripton"):
        TaskFamily.in_folder(tmp_path, descripton="d")  # type: ignore[call-arg]


# --------------------------------------------------------------------------- a third party's rule


def _counts_rule(arm_alpha: ArmAlpha | None = None) -> StatisticalRule:
    """A rule of plain functions (as a third party writes one) that decides as clopper-pearson does."""
    from certlab_clopper_pearson import rule as exact

    def decide(
        baseline_successes: int,
        baseline_n: int,
        candidate_successes: int,
        candidate_n: int,
        alpha: float = 0.05,
        delta: float = 0.10,
        conditions: int = 1,
        looks: int = 1,
    ) -> Bounds:
        bounds: Bounds = exact.decide(baseline_successes, baseline_n, candidate_successes, candidate_n, alpha, delta)
        return bounds

    return StatisticalRule(
        name="mine", description="a third party's", decide=decide, interval=exact.interval, arm_alpha=arm_alpha
    )


def test_stats_bounds_shows_a_third_party_rules_arm_level(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from certlab_clopper_pearson import rule as exact

    monkeypatch.setattr(stats_cmd, "load_rule", lambda name: _counts_rule(arm_alpha=exact.arm_alpha))
    code = main(["stats", "bounds", "--baseline", "200/200", "--candidate", "130/200", "--rule", "mine"])
    out = capsys.readouterr().out
    assert code == 0
    assert "[0.9783, 1.0000] (mine per arm, 97.5%)" in out  # the rule's own level, not 95%
    monkeypatch.setattr(stats_cmd, "load_rule", lambda name: _counts_rule())
    assert main(["stats", "bounds", "--baseline", "200/200", "--candidate", "130/200", "--rule", "mine"]) == 0
    assert "(mine, 95%)" in capsys.readouterr().out


def test_the_shipped_rules_declare_their_arm_level() -> None:
    from certlab_core._runtime.registry import discover

    registry = discover()
    for name in ("clopper-pearson", "newcombe"):
        rule = registry.get("statistical_rules", name)
        assert rule.arm_alpha is not None and rule.plan is not None
        assert stats_cmd.per_arm_alpha(rule, 0.05, 2, 1) == pytest.approx(rule.arm_alpha(0.05, 2, 1))


def test_a_rule_that_cannot_plan_is_told_what_plan_and_selfcheck_need() -> None:
    with pytest.raises(UsageError) as refused:
        stats_cmd.planner(_counts_rule())
    message = str(refused.value)
    assert message.startswith("the statistical rule 'mine' cannot plan")
    assert "StatisticalRule.plan(p_baseline, p_candidate, n, alpha, delta, conditions, looks)" in message
    assert "plan and selfcheck need" in message and "--rule" in message
    statistics = (ROOT / "docs" / "statistics.md").read_text(encoding="utf-8")
    assert "arm_alpha=" in statistics and "decide.arm_alpha" not in statistics


# --------------------------------------------------------------------------- what a reporter reads


def _record_types_reachable_from(cls: type, seen: set[type]) -> set[type]:
    if cls in seen:
        return seen
    seen.add(cls)
    module = importlib.import_module(cls.__module__)
    hints = typing.get_type_hints(cls, vars(module))
    for field in attrs.fields(cls):
        stack = [hints[field.name]]
        while stack:
            hint = stack.pop()
            stack.extend(typing.get_args(hint))
            if isinstance(hint, type) and attrs.has(hint):
                _record_types_reachable_from(hint, seen)
    return seen


def test_every_type_a_report_holds_is_exported_by_the_author_api() -> None:
    reachable = _record_types_reachable_from(api.Report, set())
    assert {"InfraError", "EarlierRun", "PassK"} <= {cls.__name__ for cls in reachable}
    for cls in reachable:
        assert cls.__name__ in api.__all__ and getattr(api, cls.__name__) is cls, cls.__name__
    plugins_md = (ROOT / "docs" / "plugins.md").read_text(encoding="utf-8")
    assert "certlab_core.report.model" not in plugins_md
