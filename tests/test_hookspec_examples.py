"""Every hook spec documents a complete example plugin; each example is run and must yield its records, and
passes mypy --strict against the contract with the example distributions docs/plugins.md points to."""

from __future__ import annotations

import inspect
import os
import re
import runpy
import shutil
import subprocess
import sys
import tempfile
import textwrap
import types
import typing
from pathlib import Path

import pytest

import certlab_core.plugin as api
from certlab_core._runtime.registry import HOOK_PREFIX, KINDS, discover
from certlab_core.plugin import hookspecs
from certlab_core.testing import KITS

ROOT = Path(__file__).resolve().parent.parent
#: The cache ``make typecheck`` leaves (the Makefile passes its place; else mypy's default, in the checkout): a copy
#: of it warms the examples' check.
WARM_CACHE = Path(os.environ.get("CERTLAB_MYPY_CACHE") or ROOT / ".mypy_cache")

MARKER = "Example plugin::"


def specs() -> list[tuple[str, types.FunctionType]]:
    return [
        (name, fn)
        for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
        if name.startswith(HOOK_PREFIX) and hasattr(fn, "certlab_spec")
    ]


def example_of(fn: types.FunctionType) -> str:
    doc = inspect.getdoc(fn) or ""
    assert MARKER in doc, f"{fn.__name__}: its docstring has no '{MARKER}' block"
    block = doc.split(MARKER, 1)[1]
    lines = []
    for line in block.splitlines()[1:]:
        if line.strip() and not line.startswith("    "):
            break
        lines.append(line)
    return textwrap.dedent("\n".join(lines))


def record_type(fn: types.FunctionType) -> type:
    hints = typing.get_type_hints(fn, {**vars(api), **vars(hookspecs)})
    (inner,) = typing.get_args(hints["return"])
    return inner  # type: ignore[no-any-return]


def test_every_kind_has_a_spec() -> None:
    assert {name[len(HOOK_PREFIX) :] for name, _ in specs() if name[len(HOOK_PREFIX) :] in KINDS} == set(KINDS)


@pytest.mark.parametrize(("name", "spec"), specs(), ids=[name for name, _ in specs()])
def test_example_plugin_yields_its_records(
    name: str, spec: types.FunctionType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # an example's files go where the test's do
    source = example_of(spec)
    module = types.ModuleType(f"example_{name}")
    exec(compile(source, module.__name__, "exec"), module.__dict__)
    assert hasattr(module, name), f"the example of {name} does not implement {name}"
    registry = discover(only=(), extra=[(module.__name__, module)])
    produced = getattr(registry.pm.hook, name)()
    flat = [record for batch in produced for record in batch]
    assert flat, f"the example of {name} yields nothing"
    expected = record_type(spec)
    for record in flat:
        assert isinstance(record, expected), f"{name} example yields {type(record).__name__}, not {expected.__name__}"
    kind = name[len(HOOK_PREFIX) :]
    if kind in KINDS:
        for record in flat:
            assert registry.get(kind, record.name) == record


# --------------------------------------------------------------------------- the docs' examples under mypy --strict

#: The example distributions docs/plugins.md sends authors to, and a file each of their modules can stand as.
EXAMPLE_FILES = {
    "fixbot_plugin.py": "examples/custom_adapter/certlab_fixbot/plugin.py",
    "fixbot_conformance.py": "examples/custom_adapter/tests/test_fixbot_conformance.py",
    "roman_plugin.py": "examples/thirdparty_family/certlab_roman/plugin.py",
}

#: What the contract's types must refuse: each line names the error codes mypy --strict gives it.
MISUSE = """\
from certlab_core.plugin import AgentOutcome, Bounds, TaskFamily

TaskFamily.in_folder("family", name="n", version="1", descripton="d", allowed_paths=[],  # expect: call-arg
                     test_paths=[], module_names=[], defects=[])
Bounds(lower=0.0, upper=0.0, verdict="pass")  # expect: arg-type
AgentOutcome(status="done")  # expect: arg-type
"""


def test_the_docs_examples_pass_mypy_strict_against_the_contract(tmp_path: Path) -> None:
    """One mypy --strict run over every hook spec's example, the example distributions' modules and every
    conformance kit's example; a file of misuses checks that the contract's types refuse them."""
    pytest.importorskip("mypy")
    folder = tmp_path / "examples"
    folder.mkdir()
    for name, spec in specs():
        (folder / f"example_{name}.py").write_text(example_of(spec))
    for target, source in EXAMPLE_FILES.items():
        (folder / target).write_text((ROOT / source).read_text(encoding="utf-8"))
    for hook, kit in KITS.items():
        (folder / f"kit_example_{hook}.py").write_text(kit_example(kit))
    (folder / "misuse.py").write_text(MISUSE)
    cache = tmp_path / "mypy-cache"
    if WARM_CACHE.is_dir():  # what make typecheck left: mypy re-checks whatever its options or sources changed
        shutil.copytree(WARM_CACHE, cache)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--show-error-codes",
            "--no-error-summary",
            "--hide-error-context",
            "--cache-dir",
            str(cache),
            str(folder),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    expected = {
        (line_number, code.strip())
        for line_number, line in enumerate(MISUSE.splitlines(), 1)
        if "# expect:" in line
        for code in line.split("# expect:", 1)[1].split(",")
    }
    found, unexpected = set(), []
    for line in result.stdout.splitlines():
        match = re.match(r"(?P<path>[^:]+):(?P<line>\d+): error: .*\[(?P<code>[a-z-]+)\]$", line)
        if match is None:
            if ": error:" in line:
                unexpected.append(line)
            continue
        where = (int(match["line"]), match["code"])
        if Path(match["path"]).name == "misuse.py" and where in expected:
            found.add(where)
        else:
            unexpected.append(line)
    assert not unexpected, "mypy --strict refuses the docs' examples:\n" + "\n".join(unexpected) + result.stderr
    assert found == expected, f"the contract's types let misuses through: {sorted(expected - found)}"


def kit_example(kit: type) -> str:
    """A conformance kit's example subclass, as docs/plugins.md shows it (tools/plugin_docs.py finds it)."""
    tool = runpy.run_path(str(ROOT / "tools" / "plugin_docs.py"))
    example, _where = tool["kit_example"](kit)
    return str(example)


@pytest.mark.parametrize("hook", sorted(KITS))
def test_each_kits_example_subclasses_its_kit_naming_a_plugin(hook: str) -> None:
    kit = KITS[hook]
    namespace: dict[str, object] = {}
    exec(compile(kit_example(kit), f"kit_example_{hook}", "exec"), namespace)
    subclasses = [v for v in namespace.values() if isinstance(v, type) and issubclass(v, kit) and v is not kit]
    assert subclasses, f"the example of {kit.__name__} defines no subclass of it"
    named = [attribute for attribute in vars(kit) if attribute.endswith("_name") and vars(kit)[attribute] == ""]
    assert named, f"{kit.__name__} has no *_name attribute to set"
    for subclass in subclasses:
        assert getattr(subclass, named[0]), f"{subclass.__name__} leaves {named[0]} empty"


def run_kit(checks: object, **fixtures: object) -> list[str]:
    """Every check of a kit on what its fixtures found; the names of those that skipped (a failure raises)."""
    skipped = []
    for name in sorted(n for n in dir(checks) if n.startswith("test_")):
        method = getattr(checks, name)
        wanted = list(inspect.signature(method).parameters)
        if any(p not in fixtures for p in wanted):
            continue
        try:
            method(*(fixtures[p] for p in wanted))
        except pytest.skip.Exception:
            skipped.append(name)
    return skipped


def example_record(hook: str) -> typing.Any:
    module = types.ModuleType(f"kit_run_{hook}")
    exec(compile(example_of(dict(specs())[hook]), module.__name__, "exec"), module.__dict__)
    (record,) = getattr(module, hook)()
    return record


def test_the_grader_example_passes_grader_conformance(tmp_path: Path) -> None:
    from certlab_core.testing.grader_checks import grade_scenarios

    record = example_record("certlab_graders")
    checks = KITS["certlab_graders"]()
    checks.grader = lambda: record  # type: ignore[attr-defined]
    checks.grader_name = record.name  # type: ignore[attr-defined]
    gradings = grade_scenarios(record, checks.family(), tmp_path, "none", workers=2)  # type: ignore[attr-defined]
    assert run_kit(checks, gradings=gradings) == ["test_it_gives_the_failure_modes_it_catches"]


def test_the_reporter_example_passes_reporter_conformance(tmp_path: Path) -> None:
    from certlab_core.sdk.forking import call_in_fork
    from certlab_core.testing.reporter_checks import render_watched

    record = example_record("certlab_reporters")
    checks = KITS["certlab_reporters"]()
    checks.reporter = lambda: record  # type: ignore[attr-defined]
    checks.reporter_name = record.name  # type: ignore[attr-defined]
    renderings = call_in_fork(render_watched, record, None, str(tmp_path / "watched"), timeout=60)
    run_kit(checks, renderings=renderings)
