"""The per-repository summary of tasks built from bug-fix commits: counted per repository, by the installed rule."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from certlab_acceptance.held_out import recorded_repository
from certlab_acceptance.user_task import load_user_task

from certlab_core._runtime.default_rule import default_rule
from certlab_core._runtime.registry import discover
from certlab_core.certify.contract import CONTRACT_ALPHA, repository_counts, repository_lines


def _bundle(tasks: dict[str, tuple[str | None, list[str]]]) -> dict[str, Any]:
    families = [{"name": name, **({"repository": repo} if repo else {})} for name, (repo, _v) in tasks.items()]
    trials = [{"family": name, "verdict": v} for name, (_repo, verdicts) in tasks.items() for v in verdicts]
    return {"families": families, "trials": trials}


BUNDLE = _bundle(
    {
        "commit-a": ("acme/parse", ["fixed", "fixed", "not-fixed"]),
        "commit-b": ("acme/parse", ["fixed", "unavailable", "fixed"]),
        "commit-c": ("other", ["not-fixed", "not-fixed", "not-fixed"]),
        "hand-written": (None, ["fixed"]),
    }
)


def test_tasks_are_counted_per_repository_and_a_task_without_one_is_left_out() -> None:
    assert repository_counts(BUNDLE) == [("acme/parse", 2, 4, 6, 5), ("other", 1, 0, 3, 3)]


def test_each_repository_gets_the_installed_rules_exact_interval() -> None:
    registry = discover()
    rule = default_rule(registry, "the test needs the default rule")
    lines = repository_lines(BUNDLE, registry)
    low, high = rule.interval(4, 5, CONTRACT_ALPHA)
    assert f"| acme/parse | 2 | 4/6 | 5 | [{low:.3f}, {high:.3f}] |" in lines
    low, high = rule.interval(0, 3, CONTRACT_ALPHA)
    assert (low, f"{high:.3f}") == (0.0, "0.708")  # Clopper-Pearson's exact upper bound for 0 of 3 at 95%
    assert f"| other | 1 | 0/3 | 3 | [0.000, {high:.3f}] |" in lines


def test_a_bundle_with_no_task_from_a_repository_has_no_summary() -> None:
    assert repository_lines(_bundle({"hand-written": (None, ["fixed"])}), discover()) == []


def _task(tmp_path: Path, source: str | None) -> Path:
    root = tmp_path / "task"
    (root / "fixture").mkdir(parents=True)
    (root / "fixture" / "tiny.py").write_text("def double(x):\n    return x\n")
    (root / "tests").mkdir()
    (root / "cases").mkdir()
    (root / "cases" / "acceptance.jsonl").write_text("")
    (root / "PROMPT.md").write_text("Fix it.\n")
    (root / "certlab.yaml").write_text("task:\n  name: tiny\n")
    if source is not None:
        (root / "cases" / "source.json").write_text(source)
    return root


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (json.dumps({"repository": "acme/parse"}), "acme/parse"),
        (None, None),
        ("{not json", None),
        (json.dumps(["acme/parse"]), None),
        (json.dumps({"repository": "two\nlines"}), None),
        (json.dumps({"repository": "x" * 201}), None),
        (json.dumps({"repository": 7}), None),
    ],
)
def test_the_repository_is_read_from_the_tasks_source_as_hostile_input(
    tmp_path: Path, source: str | None, expected: str | None
) -> None:
    assert recorded_repository(load_user_task(_task(tmp_path, source))) == expected
