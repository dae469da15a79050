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


def test_the_author_api_imports_nothing_else_of_the_kernel() -> None:
    assert allowed_imports("plugin") == set()


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
