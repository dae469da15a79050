"""The author API: the contract and the SDK for authors, a private runtime, and discovery that survives bad plugins.

A plugin imports the contract (``certlab_core.plugin`` and its ``types``) and the SDK
(``certlab_core.sdk``), nothing else of the kernel, and never the private runtime
(``certlab_core._runtime``). The import checks read the source (an AST walk), so a plugin that
reaches into the kernel fails here however it imports, inside a function too. The registry
checks register plugin modules in process; tests/test_registry_discovery.py checks the same
through real installed distributions.
"""

from __future__ import annotations

import ast
import tomllib
import types
from pathlib import Path

import pytest

from certlab_core._runtime.registry import Registry, discover, new_plugin_manager
from certlab_core.plugin import AgentAdapter, AgentOutcome, Grader, GradeResult, TaskFamily, UsageError, hookimpl

ROOT = Path(__file__).resolve().parent.parent
PLUGIN_FOLDERS = ("adapters", "graders", "plugins", "task_families", "examples")
# A kernel companion reaches past the author API into the kernel modules named here: it is released with the
# kernel and pins its exact version. Every other plugin imports the contract and the SDK alone. The list is exact both
# ways, so a companion's reach grows only where this file says so. It is empty: diagnosis, the last companion, works
# through the services its commands are given (certlab_core.plugin.Services).
COMPANIONS: dict[str, frozenset[str]] = {}


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


AUTHOR_API = ("certlab_core.plugin", "certlab_core.sdk")
RUNTIME = "certlab_core._runtime"


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def kernel_reach(path: Path) -> set[str]:
    """The kernel modules ``path`` imports beyond the author API (the contract and the SDK)."""
    return {
        module
        for module in imported_modules(path)
        if _within(module, "certlab_core") and not any(_within(module, api) for api in AUTHOR_API)
    }


def test_the_repository_has_plugin_sources_to_check() -> None:
    names = {path.parent.name for path in plugin_sources()}
    assert {"certlab_intervals", "certlab_command", "certlab_policy", "certlab_faults"} <= names


@pytest.mark.parametrize("path", plugin_sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_plugin_imports_nothing_of_the_kernel_but_the_contract_and_the_sdk(path: Path) -> None:
    reaching = sorted(kernel_reach(path))
    assert not reaching, f"{path.name} imports {reaching}; import from certlab_core.plugin or certlab_core.sdk instead"


@pytest.mark.parametrize(
    "path", plugin_sources() + plugin_sources(companions=True), ids=lambda p: str(p.relative_to(ROOT))
)
def test_no_plugin_imports_the_private_runtime(path: Path) -> None:
    """Companions included, but for the runtime module a companion declares: the runtime's registry and discovery are
    the kernel's own (a command asks the SDK's ``services``, a hook is handed a narrow protocol)."""
    reaching = sorted(m for m in imported_modules(path) if _within(m, RUNTIME))
    declared = COMPANIONS.get("/".join(path.relative_to(ROOT).parts[:2]), frozenset())
    assert [m for m in reaching if m not in declared] == [], (
        f"{path.relative_to(ROOT)} imports the private runtime {reaching}; "
        "use certlab_core.sdk.services for the installed plugins and the containment choice"
    )


def test_the_runtime_check_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from certlab_core._runtime.registry import discover\n")
    assert kernel_reach(module) == {"certlab_core._runtime.registry"}


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


def test_a_plugin_pins_the_kernels_exact_version_only_as_a_companion() -> None:
    """A companion is released with the kernel, so it pins its exact version; every other plugin asks for
    ``certlab>=...`` as a third party's would. ``certlab-all`` pins the set it releases, so it is not one."""
    kernel_version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    wrong = []
    projects = sorted(path for folder in PLUGIN_FOLDERS for path in (ROOT / folder).glob("*/pyproject.toml"))
    assert len(projects) >= 20
    for path in projects:
        folder = str(path.parent.relative_to(ROOT))
        if folder == "plugins/all":
            continue
        dependencies = tomllib.loads(path.read_text())["project"].get("dependencies", [])
        exact = [d for d in dependencies if d.replace(" ", "").startswith("certlab==")]
        if folder in COMPANIONS and exact != [f"certlab=={kernel_version}"]:
            wrong.append(f"{folder} is a companion but asks for {exact or 'no exact version'}")
        elif folder not in COMPANIONS and exact:
            wrong.append(f"{folder} pins {exact[0]}: it imports only the author API, so ask for certlab>=")
    assert wrong == []


def test_the_contract_imports_nothing_else_of_the_kernel() -> None:
    for path in sorted((ROOT / "certlab_core" / "plugin").rglob("*.py")):
        outside = [
            m for m in imported_modules(path) if _within(m, "certlab_core") and not _within(m, "certlab_core.plugin")
        ]
        assert not outside, f"{path.relative_to(ROOT)} imports {outside}"


def test_the_contract_exports_at_most_sixty_names_eagerly() -> None:
    import certlab_core.plugin as api

    assert len(api.__all__) <= 60, len(api.__all__)
    assert len(set(api.__all__)) == len(api.__all__)
    source = (ROOT / "certlab_core" / "plugin" / "__init__.py").read_text(encoding="utf-8")
    assert "__getattr__" not in source, "the contract is imported eagerly: no lazy module __getattr__"
    missing = [name for name in api.__all__ if name not in vars(api)]
    assert missing == [], f"not bound when certlab_core.plugin is imported: {missing}"


def test_every_record_of_the_contract_derives_from_the_one_base() -> None:
    import attrs

    import certlab_core.plugin as api
    from certlab_core.plugin import Record

    records = [value for value in vars(api).values() if isinstance(value, type) and attrs.has(value)]
    assert len(records) >= 30
    assert [r.__name__ for r in records if not issubclass(r, Record)] == []


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
