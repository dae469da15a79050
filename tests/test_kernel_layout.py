"""The kernel's layout: a few subpackages, held to their imports; no cycle."""

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


def imported_modules(source: str, module: str, package: str) -> set[str]:
    """Every kernel module that ``source`` (module ``module`` of ``package``) imports, at any depth: inside a
    function and under TYPE_CHECKING too, relative imports resolved."""
    targets: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                targets.add(sub if module_file(sub) is not None else base)
    return {t for t in targets if module_file(t) is not None} - {module}


def import_graph(packages: tuple[str, ...]) -> dict[str, set[str]]:
    """Module -> the kernel modules it imports, at any depth (inside a function, under TYPE_CHECKING too)."""
    return {
        module_name(path): imported_modules(
            path.read_text(encoding="utf-8"),
            module_name(path),
            module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0],
        )
        for package in packages
        for path in sorted((KERNEL / package).rglob("*.py"))
    }


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


def loops_within(graph: dict[str, set[str]], group: list[str]) -> list[list[str]]:
    """The shortest import loop through each module of ``group`` (one cycle), each loop once: [a, b, ..., a]."""
    members = set(group)
    loops: list[list[str]] = []
    seen: set[tuple[str, ...]] = set()
    for start in sorted(group):
        came_from: dict[str, str] = {}
        frontier = [start]
        while frontier and start not in came_from:
            following: list[str] = []
            for node in frontier:
                for target in sorted(graph.get(node, set()) & members):
                    if target not in came_from:
                        came_from[target] = node
                        following.append(target)
            frontier = following
        loop = [start]
        while len(loop) == 1 or loop[-1] != start:
            loop.append(came_from[loop[-1]])
        loop.reverse()
        turn = loop[:-1].index(min(loop[:-1]))  # one spelling of a loop, from its first module in order
        key = tuple(loop[turn:-1] + loop[:turn])
        if key not in seen:
            seen.add(key)
            loops.append([*key, key[0]])
    return sorted(loops)


def named_cycles(graph: dict[str, set[str]]) -> list[str]:
    """Each import cycle of ``graph`` as lines of its loops: ``a -> b -> a; b -> c -> b``."""
    return ["; ".join(" -> ".join(loop) for loop in loops_within(graph, group)) for group in cycles(graph)]


def test_the_kernel_has_no_import_cycles_function_local_imports_included() -> None:
    found = named_cycles(import_graph(tuple(SUBPACKAGES)))
    assert found == [], "import cycles in the kernel (move the shared piece down, do not hide an import): " + (
        " | ".join(found)
    )


def test_the_cycle_names_are_the_loops_that_make_it() -> None:
    graph = {"j": {"c"}, "c": {"j", "m"}, "m": {"c", "k"}, "k": {"m"}, "x": {"c"}}
    assert named_cycles(graph) == ["c -> j -> c; c -> m -> c; k -> m -> k"]


def test_the_import_graph_sees_function_local_and_relative_imports() -> None:
    source = "def f():\n    from certlab_core.certify import lab\n    from .twins import TWIN_KINDS\n"
    found = imported_modules(source, "certlab_core.certify.journal", "certlab_core.certify")
    assert found == {"certlab_core.certify.lab", "certlab_core.certify.twins"}
    from_package = imported_modules("from . import lab\n", "certlab_core.certify", "certlab_core.certify")
    assert from_package == {"certlab_core.certify.lab"}


def test_the_cycle_check_sees_a_cycle_through_a_function_local_import() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_direction_check_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from certlab_core.gate.store import TRIALS\n    from certlab_core import cli\n")
    assert kernel_imports(module) == [(2, "gate"), (3, "cli")]


FIRST_LINE_MAX = 80


def first_line_problem(source: str) -> str | None:
    """What is wrong with a module's first line, the start of a docstring that says in one line what the module
    is for: no docstring first, a line over FIRST_LINE_MAX characters (quotes included), or a summary that runs
    on to a second line. None when it is right."""
    body = ast.parse(source).body
    docstring = body[0] if body else None
    if not (
        isinstance(docstring, ast.Expr)
        and isinstance(docstring.value, ast.Constant)
        and isinstance(docstring.value.value, str)
        and docstring.lineno == 1
    ):
        return "its first line opens no docstring"
    first = source.splitlines()[0]
    if len(first) > FIRST_LINE_MAX:
        return f"its first line is {len(first)} characters (at most {FIRST_LINE_MAX}): {first}"
    summary = docstring.value.value.splitlines()
    if len(summary) > 1 and summary[1].strip():
        return f"its summary runs on past the first line: {summary[1].strip()}"
    return None


def test_every_kernel_module_says_in_a_short_first_line_what_it_is_for() -> None:
    # Each subpackage's __init__ too: its one line says what the subpackage is for.
    wrong = [
        f"{path.relative_to(KERNEL.parent)}: {problem}"
        for path in sorted(KERNEL.rglob("*.py"))
        if (problem := first_line_problem(path.read_text(encoding="utf-8"))) is not None
    ]
    assert wrong == [], f"{len(wrong)} modules: " + "; ".join(wrong)


REPOSITORY = KERNEL.parent
DISTRIBUTION_FOLDERS = ("adapters", "graders", "plugins", "task_families", "examples")


def distribution_modules() -> list[Path]:
    """Every module of the shipped plugin distributions' packages, but a family's issued tree (under ``family/``,
    the code an agent is handed, hashed into the family's taskset)."""
    packages = sorted(
        package
        for folder in DISTRIBUTION_FOLDERS
        for package in (REPOSITORY / folder).glob("*/certlab_*")
        if (package / "__init__.py").is_file()
    )
    return [
        path
        for package in packages
        for path in sorted(package.rglob("*.py"))
        if "family" not in path.relative_to(package).parts[:-1]
    ]


def test_every_distribution_module_says_in_a_short_first_line_what_it_is_for() -> None:
    modules = distribution_modules()
    assert len(modules) > 50, "the distributions' packages were not found"
    wrong = [
        f"{path.relative_to(REPOSITORY)}: {problem}"
        for path in modules
        if (problem := first_line_problem(path.read_text(encoding="utf-8"))) is not None
    ]
    assert wrong == [], f"{len(wrong)} modules: " + "; ".join(wrong)


def test_the_first_line_check_sees_what_is_wrong() -> None:
    assert first_line_problem('"""A module for this."""\n') is None
    assert first_line_problem('"""A module for this.\n\nMore about it.\n"""\n') is None
    assert first_line_problem('"""' + "x" * 75 + '"""\n') is not None  # 81 with its quotes
    assert first_line_problem('"""A summary that\nruns on.\n"""\n') is not None
    assert first_line_problem("import os\n") is not None
    assert first_line_problem('# a comment\n"""A module."""\n') is not None


def _loaded_by_name(node: ast.AST) -> list[str]:
    """The module a call ``importlib.import_module("...")`` or ``__import__("...")`` names as a literal, if any."""
    if not isinstance(node, ast.Call) or not node.args or not isinstance(node.args[0], ast.Constant):
        return []
    called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
    name = node.args[0].value
    return [name] if called in ("import_module", "__import__") and isinstance(name, str) else []


def test_the_kernel_imports_no_plugin_distributions_package() -> None:
    # The kernel knows no concrete piece: held-out acceptance, say, only through the certlab_held_out hook.
    # A module loaded by its name counts too (signing_cmd.py, then sign_key.py, loaded certlab_signing so, until
    # signing became a record of its own, EvidenceSigner).
    reaching = []
    for path in sorted(KERNEL.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else _loaded_by_name(node)
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            reaching += [
                f"{path.relative_to(KERNEL.parent)}: {n}"
                for n in names
                if n.startswith("certlab_") and not n.startswith("certlab_core")
            ]
    assert reaching == []


def test_the_plugin_import_check_sees_a_module_loaded_by_its_name() -> None:
    calls = ast.parse('importlib.import_module("certlab_x.y")\n__import__("certlab_z")\nimport_module(name)\n')
    assert [n for node in ast.walk(calls) for n in _loaded_by_name(node)] == ["certlab_x.y", "certlab_z"]


def test_held_out_acceptance_is_not_the_kernels() -> None:
    gone = ("lock", "leakscan", "prediction", "held_out")
    assert [name for name in gone if (KERNEL / "certify" / f"{name}.py").exists()] == []
    assert not (KERNEL / "testing" / "scripted_models.py").exists()
    # The held-out case reader and the leak scan of a visible suite are certlab-acceptance's, with their kit.
    assert [name for name in ("cases", "visible_calls") if (KERNEL / "sdk" / f"{name}.py").exists()] == []


def test_the_kernel_names_no_plugins_record() -> None:
    # Which distribution provides a name is the provider lists' (certlab-all's), the default rule a record's role.
    assert not (KERNEL / "_runtime" / "known.py").exists()
    named = [
        f"{path.relative_to(KERNEL.parent)}:{node.lineno}"
        for path in sorted(KERNEL.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id in ("KNOWN_PROVIDERS", "DEFAULT_RULE") for t in node.targets)
    ]
    assert named == []


# Where a kernel string may hold a distribution's name for another reason than saying what to install.
NAMES_ALLOWED = {
    ("_runtime/providers.py", "certlab-all"),  # where a hint says which list names every built-in
    ("sdk/command.py", "certlab-command"),  # the prefix of run_command's temporary folders
}


def distribution_names() -> set[str]:
    """The name of every plugin distribution of this repository (not the kernel's, ``certlab``)."""
    found = set()
    for pyproject in KERNEL.parent.glob("*/*/pyproject.toml"):
        name = re.search(r'^name = "([^"]+)"', pyproject.read_text(encoding="utf-8"), re.M)
        if name is not None and name.group(1) != "certlab":
            found.add(name.group(1))
    return found


def docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring constants of ``tree`` (a module's, a class's, a function's)."""
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, kinds)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def test_no_kernel_message_names_a_plugin_distribution() -> None:
    # "pip install X" comes from the provider lists: a kernel string naming a built-in distribution is a
    # message that is wrong for whoever installs another one (docstrings may name the built-ins as examples).
    dists = distribution_names()
    assert {"certlab-policy", "certlab-suite", "certlab-calibration", "certlab-all"} <= dists
    pattern = re.compile("|".join(re.escape(d) for d in sorted(dists, key=len, reverse=True)))
    named = []
    for path in sorted(KERNEL.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = docstrings(tree)
        where = str(path.relative_to(KERNEL))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
                named += [
                    f"certlab_core/{where}:{node.lineno} names {found.group(0)}"
                    for found in pattern.finditer(node.value)
                    if (where, found.group(0)) not in NAMES_ALLOWED
                ]
    assert named == [], "; ".join(named)


LAYOUT_ROW = re.compile(r"^\| `([a-z_]+)/` \| ", re.M)


def subpackage_summary(subpackage: str) -> str:
    """The first line of a subpackage's ``__init__`` docstring: what the subpackage is for."""
    doc = ast.get_docstring(ast.parse((KERNEL / subpackage / "__init__.py").read_text(encoding="utf-8"))) or ""
    return doc.splitlines()[0] if doc else ""


@pytest.mark.parametrize("subpackage", SUBPACKAGES)
def test_each_subpackage_says_in_its_first_line_what_it_is_for(subpackage: str) -> None:
    # Its own line, a sentence of its own (not the package's name, nor another subpackage's words), short.
    summary = subpackage_summary(subpackage)
    words = summary.rstrip(".").split()
    assert summary.endswith(".") and len(words) >= 4, f"certlab_core/{subpackage}: {summary!r}"
    assert len(f'"""{summary}') <= FIRST_LINE_MAX, f"certlab_core/{subpackage}: {summary!r}"
    others = [subpackage_summary(other) for other in SUBPACKAGES if other != subpackage]
    assert summary not in others, f"certlab_core/{subpackage} says what another subpackage says: {summary!r}"


def test_the_readme_layout_table_lists_exactly_the_kernels_subpackages() -> None:
    readme = (REPOSITORY / "README.md").read_text(encoding="utf-8")
    table = readme.split("### The kernel's layout", 1)[1].split("\n\n| subpackage |", 1)[1].split("\n\n", 1)[0]
    assert sorted(LAYOUT_ROW.findall(table)) == SUBPACKAGES


MODULE_LINES_LIMIT = 600  # issue 24: a module past it holds more than one concern


def test_no_kernel_module_is_over_600_lines() -> None:
    # certify/lab.py (1,084), sdk/forking.py (796), certify/certification.py (725), gate/runner.py (670)
    # and report/model.py (664) were, before each was split along its concerns.
    long = {
        str(path.relative_to(KERNEL)): lines
        for path in sorted(KERNEL.rglob("*.py"))
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MODULE_LINES_LIMIT
    }
    assert long == {}, f"kernel modules over {MODULE_LINES_LIMIT} lines: {long}"
