"""The author API: one module for plugin authors, a kernel built on it, and discovery that survives bad plugins.

The import checks read the source (an AST walk), so a plugin that reaches into the kernel
fails here however it imports. The registry checks register plugin modules in process;
tests/test_registry_discovery.py checks the same through real installed distributions.
"""

from __future__ import annotations

import ast
import tomllib
import types
from pathlib import Path

import pytest

from certlab_core.plugin import AgentAdapter, AgentOutcome, Grader, GradeResult, TaskFamily, UsageError, hookimpl
from certlab_core.plugin.registry import Registry, discover, new_plugin_manager

ROOT = Path(__file__).resolve().parent.parent
PLUGIN_FOLDERS = ("adapters", "graders", "plugins", "task_families", "examples")
# A kernel companion reaches past the author API into the kernel modules named here: it is released with the
# kernel and pins its exact version. Every other plugin imports certlab_core.plugin alone. The list is exact both
# ways, so a companion's reach grows only where this file says so.
COMPANIONS: dict[str, frozenset[str]] = {
    "plugins/diagnosis": frozenset(
        {
            "certlab_core.certify.acceptance",
            "certlab_core.certify.contract",
            "certlab_core.certify.lab",
            "certlab_core.certify.regrade",
            "certlab_core.gate",
            "certlab_core.gate.events",
            "certlab_core.gate.manifest",
            "certlab_core.gate.references",
            "certlab_core.gate.runner",
            "certlab_core.gate.schedule",
            "certlab_core.gate.store",
            "certlab_core.report.reading",
        }
    ),
}


def imported_modules(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
    return found


def plugin_sources(companions: bool = False) -> list[Path]:
    """Every module of every plugin distribution in the repository (not its tests, not a family's tree).

    Only the kernel companions' modules with ``companions``, and none of them without.
    """
    sources = []
    for folder in PLUGIN_FOLDERS:
        for path in sorted((ROOT / folder).rglob("certlab_*/**/*.py")):
            relative = path.relative_to(ROOT)
            if set(relative.parts) & {"tests", "family", "fixture", "build", "tree"}:
                continue
            if (relative.parts[0] + "/" + relative.parts[1] in COMPANIONS) == companions:
                sources.append(path)
    return sources


def kernel_reach(path: Path) -> set[str]:
    """The kernel modules ``path`` imports beyond the author API."""
    return {
        module
        for module in imported_modules(path)
        if (module == "certlab_core" or module.startswith("certlab_core."))
        and module != "certlab_core.plugin"
        and not module.startswith("certlab_core.plugin.")
    }


def test_the_repository_has_plugin_sources_to_check() -> None:
    names = {path.parent.name for path in plugin_sources()}
    assert {"certlab_intervals", "certlab_command", "certlab_policy", "certlab_faults"} <= names


@pytest.mark.parametrize("path", plugin_sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_plugin_imports_nothing_of_the_kernel_but_the_author_api(path: Path) -> None:
    reaching = sorted(kernel_reach(path))
    submodules = [m for m in imported_modules(path) if m.startswith("certlab_core.plugin.")]
    assert not reaching, f"{path.name} imports {reaching}; import from certlab_core.plugin instead"
    assert not submodules, f"{path.name} imports {submodules}; the author API is certlab_core.plugin itself"


@pytest.mark.parametrize("folder", sorted(COMPANIONS))
def test_a_companion_reaches_exactly_the_kernel_modules_declared_for_it(folder: str) -> None:
    sources = [p for p in plugin_sources(companions=True) if str(p.relative_to(ROOT)).startswith(folder + "/")]
    assert sources, f"{folder}: no modules found"
    reached = {
        module: sorted(p.name for p in sources if module in kernel_reach(p))
        for p in sources
        for module in kernel_reach(p)
    }
    undeclared = sorted(
        f"{module} ({', '.join(files)})" for module, files in reached.items() if module not in COMPANIONS[folder]
    )
    assert undeclared == [], f"{folder} imports kernel modules not declared in COMPANIONS: {undeclared}"
    assert sorted(COMPANIONS[folder] - set(reached)) == [], f"{folder}: declared but no longer imported"


@pytest.mark.parametrize("folder", sorted(COMPANIONS))
def test_a_companion_pins_the_kernels_exact_version(folder: str) -> None:
    kernel_version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    project = tomllib.loads((ROOT / folder / "pyproject.toml").read_text())["project"]
    assert f"certlab=={kernel_version}" in project["dependencies"], project["dependencies"]


def test_the_author_api_imports_nothing_else_of_the_kernel() -> None:
    for path in sorted((ROOT / "certlab_core" / "plugin").glob("*.py")):
        outside = [
            m
            for m in imported_modules(path)
            if m.startswith("certlab_core")
            and m not in ("certlab_core.plugin",)
            and not m.startswith("certlab_core.plugin.")
        ]
        assert not outside, f"certlab_core/plugin/{path.name} imports {outside}"


def test_every_public_name_of_the_author_api_is_importable() -> None:
    import certlab_core.plugin as api

    missing = [name for name in api.__all__ if not hasattr(api, name)]
    assert not missing


# --------------------------------------------------------------------------- discovery in process


def plugin(name: str, source: str) -> tuple[str, types.ModuleType]:
    module = types.ModuleType(name)
    module.__dict__["hookimpl"] = hookimpl
    exec(compile(source, name, "exec"), module.__dict__)
    return name, module


GOOD = plugin(
    "good",
    """
from certlab_core.plugin import AgentAdapter, AgentOutcome

@hookimpl
def certlab_agents():
    return [AgentAdapter(name="quiet", description="does nothing", run=lambda r: AgentOutcome(status="completed"))]
""",
)
RAISES = plugin(
    "raises",
    """
@hookimpl
def certlab_agents():
    raise KeyError("boom")
""",
)
WRONG = plugin(
    "wrong",
    """
from certlab_core.plugin import AgentAdapter, AgentOutcome

@hookimpl
def certlab_graders():
    return [AgentAdapter(name="x", description="x", run=lambda r: AgentOutcome(status="completed"))]
""",
)
NOT_A_LIST = plugin(
    "not-a-list",
    """
@hookimpl
def certlab_task_families():
    return "intervals"
""",
)


def test_a_hook_that_raises_is_left_out_and_named_while_the_rest_keep_working() -> None:
    registry = discover(only=(), extra=[GOOD, RAISES])
    assert registry.get(AgentAdapter, "quiet").name == "quiet"
    assert [f.line() for f in registry.failures] == [
        "broken plugin raises ((registered in process), hook certlab_agents): raised KeyError: 'boom'"
    ]


def test_a_record_of_the_wrong_type_is_refused_and_named() -> None:
    registry = discover(only=(), extra=[GOOD, WRONG, NOT_A_LIST])
    assert registry.names(Grader) == []
    assert registry.names(TaskFamily) == []
    lines = sorted(f.line() for f in registry.failures)
    assert lines == [
        "broken plugin not-a-list ((registered in process), hook certlab_task_families): returned str, not a list",
        "broken plugin wrong ((registered in process), hook certlab_graders): "
        "returned a AgentAdapter where a Grader belongs",
    ]


def test_lookup_is_typed_by_record() -> None:
    registry = discover(only=(), extra=[GOOD])
    adapter = registry.get(AgentAdapter, "quiet")
    assert isinstance(adapter, AgentAdapter)
    assert registry.all(AgentAdapter) == {"quiet": adapter}
    with pytest.raises(TypeError, match="GradeResult is not a record any certlab hook returns"):
        registry.get(GradeResult, "quiet")


def test_a_duplicate_name_is_refused_only_when_it_is_used() -> None:
    twin = plugin("twin", _source_of_good())
    registry = discover(only=(), extra=[GOOD, twin])
    assert registry.names(AgentAdapter) == ["quiet"]
    with pytest.raises(UsageError, match="two plugins provide the agent 'quiet'"):
        registry.get(AgentAdapter, "quiet")
    (warning,) = registry.warnings()
    assert "'quiet' is provided by" in warning.line()
    assert registry.names(TaskFamily) == []  # other kinds are untouched


def _source_of_good() -> str:
    return """
from certlab_core.plugin import AgentAdapter, AgentOutcome

@hookimpl
def certlab_agents():
    return [AgentAdapter(name="quiet", description="a twin", run=lambda r: AgentOutcome(status="completed"))]
"""


def test_an_unknown_built_in_name_says_which_distribution_to_install() -> None:
    registry = Registry(new_plugin_manager())
    with pytest.raises(UsageError) as refused:
        registry.get(TaskFamily, "ledger")
    assert str(refused.value) == (
        "unknown task family 'ledger' (valid: none installed); "
        "it is provided by the distribution certlab-ledger: pip install certlab-ledger"
    )


def test_an_outcome_needs_only_its_status() -> None:
    outcome = AgentOutcome(status="unavailable", detail="fixbot is not on PATH")
    assert (outcome.exit_code, outcome.stdout_tail, outcome.wall_s, outcome.leftover_processes) == (None, "", 0.0, ())


def test_a_distribution_seen_twice_on_sys_path_is_one_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its source folder on sys.path beside its installed metadata (as pytest does for a package's test module)."""
    import importlib.metadata
    import shutil
    import sys

    installed = importlib.metadata.distribution("certlab-suite")
    metadata = Path(str(installed._path))  # type: ignore[attr-defined]
    shutil.copytree(metadata, tmp_path / metadata.name)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    registry = discover()
    assert "suite" in registry.names(Grader)
    assert registry.failures == []


def test_a_plugin_is_named_however_its_separators_and_case_are_written() -> None:
    # CERTLAB_PLUGINS=retry_world used to be "not installed", for the entry point retry-world.
    registry = discover(only=["retry_world", "Clopper_Pearson", "sandbox.bwrap"])
    assert registry.names("tool_worlds") == ["retry-inventory"]
    assert registry.names("statistical_rules") == ["clopper-pearson"]
    assert registry.names("sandboxes") == ["bwrap"]
    with pytest.raises(UsageError, match="names plugins that are not installed: no_such"):
        discover(only=["retry_world", "no_such"])
