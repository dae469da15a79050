"""The machine family proves itself, including its coordinated two-file defects and its pinned fix location."""

from __future__ import annotations

import ast
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from certlab_machine.plugin import certlab_task_families

from certlab_core.records import Defect, TaskFamily
from certlab_core.testing import FamilyConformance

FAMILY: TaskFamily = certlab_task_families()[0]
DEFECT_IDS = [defect.id for defect in FAMILY.defects]

# Evaluates every held-out case in the tree given as argv[1]; prints one JSON verdict a line.
CASE_RUNNER = r"""
import importlib, json, sys
sys.path.insert(0, sys.argv[1])
for line in sys.stdin:
    if not line.strip():
        continue
    case = json.loads(line)
    module_name, function_name = case["call"].split(":")
    try:
        module = importlib.import_module(module_name)
        if not module.__file__.startswith(sys.argv[1]):
            raise SystemExit(f"{module_name} was imported from {module.__file__}, not from the tree under test")
        function = getattr(module, function_name)
        result = function(*case.get("args", []), **case.get("kwargs", {}))
    except Exception as error:
        held = "raises" in case and type(error).__name__ == case["raises"]
        print(json.dumps({"id": case["id"], "held": held, "got": "raised " + type(error).__name__}))
        continue
    held = "raises" not in case and result == case["expect"]
    print(json.dumps({"id": case["id"], "held": held, "got": repr(result)}))
"""


def load_cases() -> list[dict[str, Any]]:
    lines = Path(FAMILY.cases_file).read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def defect(defect_id: str) -> Defect:
    return next(d for d in FAMILY.defects if d.id == defect_id)


def build_tree(destination: Path, seeded: Defect | None = None, keep_clean: tuple[str, ...] = ()) -> Path:
    """A copy of the clean tree with ``seeded``'s seeds applied, except on the paths in ``keep_clean``."""
    tree = destination / "tree"
    shutil.copytree(FAMILY.tree_dir, tree)
    for seed in seeded.seeds if seeded else ():
        if seed.path in keep_clean:
            continue
        target = tree / seed.path
        text = target.read_text()
        assert text.count(seed.find) == 1
        target.write_text(text.replace(seed.find, seed.replace))
    return tree


def isolated_env(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(PYTHONPATH=str(tree), PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", PYTHONDONTWRITEBYTECODE="1")
    return env


def run_suite(tree: Path, *selection: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *(selection or ("tests",))]
    return subprocess.run(command, cwd=tree, env=isolated_env(tree), capture_output=True, text=True, timeout=60)


def run_cases(tree: Path) -> dict[str, bool]:
    cases_text = Path(FAMILY.cases_file).read_text()
    completed = subprocess.run(
        [sys.executable, "-c", CASE_RUNNER, str(tree)],
        input=cases_text,
        cwd=tree,
        env=isolated_env(tree),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    verdicts = [json.loads(line) for line in completed.stdout.splitlines()]
    return {verdict["id"]: verdict["held"] for verdict in verdicts}


def test_family_record_points_at_real_files() -> None:
    assert FAMILY.name == "machine"
    for path in (FAMILY.tree_dir, FAMILY.prompt_file, FAMILY.cases_file):
        assert Path(path).is_absolute() and Path(path).exists()
    assert sorted(p.name for p in (Path(FAMILY.tree_dir) / "tests").iterdir()) == [
        "test_api.py",
        "test_evaluator.py",
        "test_parser.py",
        "test_tokenizer.py",
    ]
    assert FAMILY.allowed_paths == ("machine/*.py",)
    assert not any(pattern.startswith("tests") for pattern in FAMILY.allowed_paths)


def test_six_defects_of_the_required_distinct_classes() -> None:
    classes = [d.defect_class for d in FAMILY.defects]
    assert sorted(classes) == sorted(
        [
            "coordinated-node-shape",
            "coordinated-token-split",
            "position-off-by-one",
            "operator-precedence",
            "associativity",
            "scope-leak",
        ]
    )
    assert len(set(DEFECT_IDS)) == 6


@pytest.mark.parametrize("defect_id", DEFECT_IDS)
def test_each_seed_finds_exactly_one_place_in_the_clean_file(defect_id: str) -> None:
    for seed in defect(defect_id).seeds:
        assert (Path(FAMILY.tree_dir) / seed.path).read_text().count(seed.find) == 1
        assert seed.find != seed.replace


def test_clean_tree_passes_its_suite_and_every_held_out_case(tmp_path: Path) -> None:
    tree = build_tree(tmp_path)
    completed = run_suite(tree)
    assert completed.returncode == 0, completed.stdout
    verdicts = run_cases(tree)
    assert len(verdicts) == len(load_cases())
    assert all(verdicts.values()), {case: held for case, held in verdicts.items() if not held}


@pytest.mark.parametrize("defect_id", DEFECT_IDS)
def test_seeded_tree_fails_its_suite_and_some_held_out_case(tmp_path: Path, defect_id: str) -> None:
    tree = build_tree(tmp_path, defect(defect_id))
    completed = run_suite(tree)
    assert completed.returncode == 1, completed.stdout
    assert " failed" in completed.stdout
    verdicts = run_cases(tree)
    assert not all(verdicts.values())


def test_held_out_cases_are_well_formed_and_unique() -> None:
    cases = load_cases()
    assert 10 <= len(cases) <= 25
    assert len({case["id"] for case in cases}) == len(cases)
    for case in cases:
        assert ("expect" in case) != ("raises" in case), case["id"]
        assert case["call"].split(":")[0].split(".")[0] in FAMILY.module_names


def _evaluate(node: ast.expr, names: dict[str, Any]) -> Any:
    """The value of a literal expression, reading module-level literal constants by name; ValueError otherwise."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand, names)
    if isinstance(node, ast.List | ast.Tuple):
        return [_evaluate(element, names) for element in node.elts]
    if isinstance(node, ast.Dict):
        keys = [key for key in node.keys if key is not None]
        if len(keys) != len(node.keys):
            raise ValueError("a dict with ** unpacking is not a literal")
        return {_evaluate(key, names): _evaluate(value, names) for key, value in zip(keys, node.values, strict=True)}
    raise ValueError(ast.dump(node))


def visible_literal_calls() -> set[tuple[str, str]]:
    """Every call in the visible suite whose arguments are all literals, as (function name, JSON of args)."""
    calls: set[tuple[str, str]] = set()
    for test_file in (Path(FAMILY.tree_dir) / "tests").glob("test_*.py"):
        module = ast.parse(test_file.read_text())
        names: dict[str, Any] = {}
        for statement in module.body:
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
                target = statement.targets[0]
                try:
                    if isinstance(target, ast.Name):
                        names[target.id] = _evaluate(statement.value, names)
                except (ValueError, TypeError):
                    continue
        for node in ast.walk(module):
            if not isinstance(node, ast.Call) or node.keywords:
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            try:
                args = [_evaluate(arg, names) for arg in node.args]
            except (ValueError, TypeError):
                continue
            calls.add((str(name), json.dumps(args, sort_keys=True)))
    return calls


def test_held_out_inputs_never_appear_in_the_visible_suite() -> None:
    visible = visible_literal_calls()
    assert ("parse_sexpr", json.dumps(["1 + 2 * 3"])) in visible  # the scan does see the visible calls
    for case in load_cases():
        function_name = case["call"].split(":")[1]
        assert (function_name, json.dumps(case["args"], sort_keys=True)) not in visible, case["id"]


def test_the_wheel_ships_every_family_file(tmp_path: Path) -> None:
    source = Path(__file__).parents[1]
    copy = tmp_path / "certlab-machine"
    build_output = shutil.ignore_patterns("*.egg-info", "build", "__pycache__")

    def ignored(folder: str, names: list[str]) -> set[str]:
        own_tests = {"tests"} & set(names) if Path(folder) == source else set()
        return set(build_output(folder, names)) | own_tests

    shutil.copytree(source, copy, ignore=ignored)
    completed = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), "."],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    (wheel,) = tmp_path.glob("certlab_machine-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        shipped = {name for name in archive.namelist() if name.startswith("certlab_machine/family/")}
    family_dir = source / "certlab_machine" / "family"
    expected = {
        "certlab_machine/family/" + path.relative_to(family_dir).as_posix()
        for path in family_dir.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert shipped == expected
    assert "certlab_machine/family/tree/tests/test_tokenizer.py" in shipped


def allowed(path: str) -> bool:
    return any(fnmatch.fnmatch(path, pattern) for pattern in FAMILY.allowed_paths) and not path.startswith("tests/")


COORDINATED = ["operator-token-in-tree", "power-split-into-stars"]


@pytest.mark.parametrize("defect_id", COORDINATED)
def test_coordinated_defects_span_two_files_and_neither_revert_alone_is_a_fix(tmp_path: Path, defect_id: str) -> None:
    coordinated = defect(defect_id)
    paths = sorted({seed.path for seed in coordinated.seeds})
    assert len(paths) == 2
    for reverted in paths:
        tree = build_tree(tmp_path / reverted.replace("/", "_"), coordinated, keep_clean=(reverted,))
        completed = run_suite(tree)
        assert completed.returncode == 1, f"reverting only {reverted} made the suite pass"
        assert " failed" in completed.stdout


def test_node_shape_drift_keeps_end_to_end_tests_green_and_parser_tests_red(tmp_path: Path) -> None:
    tree = build_tree(tmp_path, defect("operator-token-in-tree"))
    assert run_suite(tree, "tests/test_evaluator.py", "tests/test_api.py", "tests/test_tokenizer.py").returncode == 0
    assert run_suite(tree, "tests/test_parser.py").returncode == 1


def test_power_split_is_half_compensated_with_the_wrong_grouping(tmp_path: Path) -> None:
    tree = build_tree(tmp_path, defect("power-split-into-stars"))
    verdicts = run_cases(tree)
    assert verdicts["dump-power-negation"] is False  # the tokenizer splits "**"
    assert verdicts["power-tower"] is False  # the parser's glue groups powers to the left
    assert verdicts["let-power"] is True  # a lone power still works: the hack half-compensates


# A policy-legal but wrong fix for the bad-character position: the api shifts tokenizer positions back.
WRONG_API_FIX = (
    '"column": error.position + 1}',
    '"column": error.position + (0 if isinstance(error, TokenizeError) else 1)}',
)


def test_pinned_location_a_wrong_fix_in_the_api_greens_api_tests_but_not_tokenizer_tests(tmp_path: Path) -> None:
    pinned = defect("bad-character-position")
    assert {seed.path for seed in pinned.seeds} == {"machine/tokenizer.py"}
    tree = build_tree(tmp_path, pinned)
    assert run_suite(tree, "tests/test_api.py").returncode == 1
    api = tree / "machine" / "api.py"
    find, replace = WRONG_API_FIX
    assert api.read_text().count(find) == 1
    api.write_text(api.read_text().replace(find, replace))
    assert allowed("machine/api.py")  # the wrong fix is within the edit policy
    assert run_suite(tree, "tests/test_api.py").returncode == 0
    tokenizer_run = run_suite(tree, "tests/test_tokenizer.py")
    assert tokenizer_run.returncode == 1
    assert "test_unexpected_character_position" in tokenizer_run.stdout
    assert run_suite(tree).returncode == 1
    assert run_cases(tree)["malformed-number-column"] is False


def test_allowed_paths_cover_the_package_and_never_the_tests() -> None:
    assert all(allowed(seed.path) for d in FAMILY.defects for seed in d.seeds)
    assert not allowed("tests/test_api.py")
    assert not allowed("conftest.py")


class TestConformance(FamilyConformance):
    """certlab's own conformance suite, run against the installed machine family."""

    family_name = "machine"
