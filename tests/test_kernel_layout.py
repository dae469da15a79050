"""The kernel's folders show its architecture: a few subpackages, each saying what it may import, and held to it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

KERNEL = Path(__file__).resolve().parent.parent / "certlab_core"
SUBPACKAGES = sorted(p.parent.name for p in KERNEL.glob("*/__init__.py"))
MAY_IMPORT = re.compile(r"^May import: (.+)\.$", re.M)


def allowed_imports(subpackage: str) -> set[str]:
    """The subpackages its ``__init__`` docstring says it may import (``nothing``, a list, or ``any part``)."""
    doc = ast.get_docstring(ast.parse((KERNEL / subpackage / "__init__.py").read_text(encoding="utf-8"))) or ""
    found = MAY_IMPORT.findall(doc)
    assert len(found) == 1, f"certlab_core/{subpackage}/__init__.py: its docstring needs one 'May import: ...' line"
    said = found[0]
    if said == "nothing else of the kernel":
        return set()
    if said == "any part of the kernel":
        return set(SUBPACKAGES)
    names = {name.strip() for name in said.split(",")}
    assert names <= set(SUBPACKAGES), f"{subpackage}: 'May import' names no such subpackage: {names - set(SUBPACKAGES)}"
    return names


def kernel_imports(path: Path) -> list[tuple[int, str]]:
    """(line, subpackage) of every import of the kernel in ``path``, at any depth (an import inside a function too)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        modules: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module] if node.module != "certlab_core" else [f"certlab_core.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        for module in modules:
            parts = module.split(".")
            if parts[0] == "certlab_core" and len(parts) > 1 and parts[1] != "__version__":
                found.append((node.lineno, parts[1]))
    return found


def test_the_kernel_root_holds_subpackages_only() -> None:
    loose = sorted(p.name for p in KERNEL.glob("*.py") if p.name != "__init__.py")
    assert loose == [], f"modules at the kernel's root, outside any subpackage: {loose}"
    assert len(SUBPACKAGES) <= 10, SUBPACKAGES


@pytest.mark.parametrize("subpackage", SUBPACKAGES)
def test_a_subpackage_imports_only_what_its_docstring_allows(subpackage: str) -> None:
    allowed = allowed_imports(subpackage) | {subpackage}
    wrong = [
        f"{path.relative_to(KERNEL.parent)}:{line} imports certlab_core.{target}"
        for path in sorted((KERNEL / subpackage).rglob("*.py"))
        for line, target in kernel_imports(path)
        if target not in allowed
    ]
    assert wrong == [], f"certlab_core/{subpackage} may import only {sorted(allowed)}: " + "; ".join(wrong)


def test_the_contract_the_sdk_and_the_runtime_import_in_one_direction() -> None:
    # The contract imports nothing of the kernel; the SDK, the contract; the private runtime, both.
    assert allowed_imports("plugin") == set()
    assert allowed_imports("sdk") == {"plugin"}
    assert allowed_imports("_runtime") == {"plugin", "sdk"}


def module_file(module: str) -> Path | None:
    """The source file of a kernel module (a package's ``__init__``), or None when it is not one."""
    parts = module.split(".")
    if parts[0] != "certlab_core":
        return None
    base = KERNEL.joinpath(*parts[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def module_name(path: Path) -> str:
    parts = path.relative_to(KERNEL.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(packages: tuple[str, ...]) -> dict[str, set[str]]:
    """Module -> the kernel modules it imports, at any depth (inside a function, under TYPE_CHECKING too)."""
    graph: dict[str, set[str]] = {}
    for package in packages:
        for path in sorted((KERNEL / package).rglob("*.py")):
            targets: set[str] = set()
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    targets |= {alias.name for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    for alias in node.names:
                        sub = f"{node.module}.{alias.name}"
                        targets.add(sub if module_file(sub) is not None else node.module)
            graph[module_name(path)] = {t for t in targets if module_file(t) is not None} - {module_name(path)}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph``: each strongly connected set of two or more modules (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_contract_the_sdk_and_the_runtime_have_no_import_cycles() -> None:
    assert cycles(import_graph(("plugin", "sdk", "_runtime"))) == []


def test_the_cycle_check_sees_a_cycle_through_a_function_local_import() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_direction_check_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from certlab_core.gate.store import TRIALS\n    from certlab_core import cli\n")
    assert kernel_imports(module) == [(2, "gate"), (3, "cli")]


def test_the_kernel_imports_no_plugin_distributions_package() -> None:
    # The kernel knows no concrete piece: held-out acceptance, say, only through the certlab_held_out hook.
    reaching = []
    for path in sorted(KERNEL.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            reaching += [
                f"{path.relative_to(KERNEL.parent)}: {n}"
                for n in names
                if n.startswith("certlab_") and not n.startswith("certlab_core")
            ]
    assert reaching == []


def test_held_out_acceptance_is_not_the_kernels() -> None:
    gone = ("lock", "leakscan", "prediction", "held_out")
    assert [name for name in gone if (KERNEL / "certify" / f"{name}.py").exists()] == []
    assert not (KERNEL / "testing" / "scripted_models.py").exists()
