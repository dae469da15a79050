"""The mutant generator: each operator's edit, what is never mutated, and the same mutants on any machine."""

from __future__ import annotations

import ast
import textwrap

import pytest
from certlab_mutation.engine import MUTATOR, file_mutants, mutable_files, mutants_sha256

from certlab_core._runtime.registry import Registry, discover
from certlab_core.plugin.errors import InstrumentError


@pytest.fixture(scope="module")
def registry() -> Registry:
    """The installed plugins, certlab-mutation among them."""
    return discover()


def edits(source: str) -> list[tuple[str, str, str]]:
    text = textwrap.dedent(source)
    return [(m.operator, m.original, m.replacement) for m in file_mutants("m.py", text)]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("x = a < b\n", [("compare", "<", "<=")]),
        ("x = a >= b\n", [("compare", ">=", ">")]),
        ("x = a == b != c\n", [("compare", "==", "!="), ("compare", "!=", "==")]),
        ("x = a is not None\n", [("compare", "is not", "is")]),
        ("x = a not in b\n", [("compare", "not in", "in")]),
        ("x = a + b\n", [("arithmetic", "+", "-")]),
        ("x = (a) * (b)\n", [("arithmetic", "*", "/")]),
        ("x = a // b\n", [("arithmetic", "//", "*")]),
        ("x -= y\n", [("arithmetic", "-=", "+=")]),
        ("x = a and b and c\n", [("boolean", "and b and", "or b or")]),
        ("x = not a\n", [("not", "not ", "")]),
        ("x = not (a or b)\n", [("not", "not (", "("), ("boolean", "or", "and")]),
        ("x = 41\n", [("integer", "41", "42")]),
        ("x = min(a, b)\n", [("minmax", "min", "max")]),
        ("x = True\n", [("constant", "True", "False")]),
        ("for i in a:\n    break\n", [("loop", "break", "continue")]),
    ],
)
def test_each_operator_makes_one_small_edit(source: str, expected: list[tuple[str, str, str]]) -> None:
    # the boolean swap changes every ``and`` of the expression at once, so its text runs from the first to the last
    assert edits(source) == expected


def test_every_mutant_parses_and_changes_the_tree() -> None:
    text = "def f(a, b):\n    if not a or b < 2:\n        return -a * b\n    return max(a, b) + 1\n"
    original = ast.dump(ast.parse(text))
    mutants = file_mutants("f.py", text)
    assert len(mutants) == 8
    for mutant in mutants:
        assert ast.dump(ast.parse(mutant.apply(text))) != original


def test_annotations_fstrings_strings_and_the_main_guard_are_not_mutated() -> None:
    source = """
        def f(a: "int" = 1, *, b: list[int] | None = None) -> dict[str, int]:
            c: tuple[int, int] = (0, 0)
            return {f"{a + 1}": 2 * 3, "s" + "t": 0}
        if __name__ == "__main__":
            f(1 + 2)
    """
    found = edits(source)
    assert ("integer", "1", "2") in found  # the default value is code
    assert ("arithmetic", "*", "/") in found
    assert all(op != "arithmetic" or original == "*" for op, original, _new in found)  # "s" + "t" is text
    lines = {m.line for m in file_mutants("m.py", textwrap.dedent(source))}
    assert 6 not in lines and 7 not in lines  # nothing under the main guard


def test_mutants_are_named_by_place_and_operator_in_source_order() -> None:
    text = "def f(a):\n    return a < 1\n"
    ids = [m.id for m in file_mutants("pkg/f.py", text)]
    assert ids == ["pkg/f.py:2:14:compare", "pkg/f.py:2:16:integer"]


def test_a_survivor_is_shown_as_a_one_line_diff() -> None:
    text = "def f(a):\n    x = 1\n    return a < x\n"
    mutant = next(m for m in file_mutants("f.py", text) if m.operator == "compare")
    diff = mutant.diff(text)
    assert "-    return a < x\n+    return a <= x\n" in diff
    assert diff.startswith("--- a/f.py\n+++ b/f.py\n")


def test_the_same_source_gives_the_same_mutants_and_hash_on_any_machine() -> None:
    text = "def f(a, b):\n    if not a or b < 2:\n        return -a * b\n    return max(a, b) + 1\n"
    first, second = file_mutants("f.py", text), file_mutants("f.py", text)
    assert first == second
    # pinned: a change of this hash is a change of the operator set, which must bump MUTATOR
    assert MUTATOR == "certlab-ast/1"
    assert mutants_sha256(first) == "ba0847d8e9595b619625d45dea4f17af5feabbc36f20b1326f2e8a594a2dc697"


def test_a_file_that_does_not_parse_is_one_clear_error() -> None:
    with pytest.raises(InstrumentError, match=r"broken\.py: cannot be parsed"):
        file_mutants("broken.py", "def f(:\n")


def test_only_the_code_an_agent_may_change_is_mutated(registry: Registry) -> None:
    assert mutable_files(registry.get("task_families", "intervals")) == ["intervals.py"]
    ledger = mutable_files(registry.get("task_families", "ledger"))
    assert ledger and all(path.startswith("ledger/") for path in ledger)


def test_the_published_mutant_sets_are_made_again_here(registry: Registry) -> None:
    """The bundle in certifications/ was made on another machine: the same trees give the same mutants here."""
    import json
    from pathlib import Path

    from certlab_mutation.engine import family_mutants

    from certlab_core.sdk.workcopy import taskset_sha256

    bundle = json.loads((Path(__file__).parents[3] / "certifications" / "oracle-all" / "bundle.json").read_text())
    recorded = {p["family"]: p["mutation"] for p in bundle["instrument"] if p.get("mutation")}
    assert set(recorded) == {"intervals", "ledger", "machine"}
    for name, record in recorded.items():
        family = registry.get("task_families", name)
        assert taskset_sha256(family) == record["taskset_sha256"], f"{name} changed: run make certifications"
        mutants = family_mutants(family)
        assert (len(mutants), mutants_sha256(mutants)) == (record["mutants"], record["mutants_sha256"]), name
