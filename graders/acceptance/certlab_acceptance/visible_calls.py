"""A visible suite's literal calls, to refuse held-out inputs it shows.

A call counts when every argument is a literal: a constant, a list, tuple or dict of
literals, a negated number, a name bound to a literal (at module level or once in the same
function), or a row of a ``pytest.mark.parametrize`` table bound to the test's arguments.
A held-out case leaks when a visible call names the same function (the last part of the
case's ``module:function``) with equal arguments, compared as JSON data (tuples as lists).
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from attrs import frozen

from certlab_acceptance.cases import HeldOutCase

MAX_ROWS = 10_000


class NotLiteral(Exception):
    """The expression is not a literal this scan can evaluate."""


@frozen
class LiteralCall:
    function: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    file: str
    line: int


def _json_like(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_json_like(item) for item in value]
    if isinstance(value, dict):
        return {key: _json_like(item) for key, item in value.items()}
    return value


def evaluate(node: ast.AST, names: Mapping[str, Any]) -> Any:
    """The value of a literal expression (names read from ``names``); NotLiteral otherwise."""
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bytes | complex) or node.value is Ellipsis:
            raise NotLiteral("not JSON")
        return node.value
    if isinstance(node, ast.Name):
        if node.id in names:
            return names[node.id]
        raise NotLiteral(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        operand = evaluate(node.operand, names)
        if isinstance(operand, bool) or not isinstance(operand, int | float):
            raise NotLiteral("sign of a non-number")
        return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.List | ast.Tuple):
        if any(isinstance(element, ast.Starred) for element in node.elts):
            raise NotLiteral("starred")
        return [evaluate(element, names) for element in node.elts]
    if isinstance(node, ast.Dict):
        if any(key is None for key in node.keys):
            raise NotLiteral("** in a dict")
        keys = [evaluate(key, names) for key in node.keys if key is not None]
        if not all(isinstance(key, str) for key in keys):
            raise NotLiteral("a dict key that is not a string")
        return {key: evaluate(value, names) for key, value in zip(keys, node.values, strict=True)}
    raise NotLiteral(type(node).__name__)


def _literal_assignments(statements: Iterable[ast.stmt], names: Mapping[str, Any]) -> dict[str, Any]:
    """Names assigned exactly once, to a literal, among ``statements`` (nested blocks included)."""
    values: dict[str, Any] = {}
    counts: dict[str, int] = {}
    for statement in statements:
        for node in ast.walk(statement):
            targets: list[ast.expr] = []
            value: ast.expr | None = None
            if isinstance(node, ast.Assign):
                targets, value = list(node.targets), node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            elif isinstance(node, ast.AugAssign | ast.For | ast.With | ast.NamedExpr):
                target = getattr(node, "target", None)
                if isinstance(target, ast.Name):
                    counts[target.id] = counts.get(target.id, 0) + 2
                continue
            for target in targets:
                if isinstance(target, ast.Name):
                    counts[target.id] = counts.get(target.id, 0) + 1
                    try:
                        values[target.id] = evaluate(value, {**names, **values}) if value is not None else None
                    except NotLiteral:
                        values.pop(target.id, None)
                        counts[target.id] += 1
    return {name: value for name, value in values.items() if counts.get(name) == 1}


def _parametrize(decorator: ast.expr) -> ast.Call | None:
    if isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute):
        return decorator if decorator.func.attr == "parametrize" else None
    return None


def _rows(decorator: ast.Call, names: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The bindings of one parametrize decorator, or None when its table is not literal."""
    if len(decorator.args) < 2:
        return None
    try:
        argnames = evaluate(decorator.args[0], names)
    except NotLiteral:
        return None
    if isinstance(argnames, str):
        argnames = [part.strip() for part in argnames.split(",") if part.strip()]
    if not isinstance(argnames, list) or not all(isinstance(n, str) for n in argnames):
        return None
    table = decorator.args[1]
    if not isinstance(table, ast.List | ast.Tuple):
        return None
    rows: list[dict[str, Any]] = []
    for element in table.elts:
        if isinstance(element, ast.Call) and getattr(element.func, "attr", None) == "param":
            values_nodes: list[ast.expr] = list(element.args)
        elif len(argnames) == 1:
            values_nodes = [element]
        elif isinstance(element, ast.List | ast.Tuple):
            values_nodes = list(element.elts)
        else:
            continue
        try:
            values = [evaluate(node, names) for node in values_nodes]
        except NotLiteral:
            continue
        if len(argnames) == 1 and not (isinstance(element, ast.Call)):
            rows.append({argnames[0]: values[0]})
        elif len(values) == len(argnames):
            rows.append(dict(zip(argnames, values, strict=True)))
    return rows


def _callee(node: ast.Call) -> str | None:
    if isinstance(node.func, ast.Name):
        return node.func.id
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    return None


def _calls_in(tree: ast.AST, names: Mapping[str, Any], file: str) -> Iterator[LiteralCall]:
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        function = _callee(node)
        if function is None or any(isinstance(arg, ast.Starred) for arg in node.args):
            continue
        if any(keyword.arg is None for keyword in node.keywords):
            continue
        try:
            args = tuple(_json_like(evaluate(arg, names)) for arg in node.args)
            kwargs = {str(k.arg): _json_like(evaluate(k.value, names)) for k in node.keywords}
        except NotLiteral:
            continue
        yield LiteralCall(function, args, kwargs, file, node.lineno)


def literal_calls(source: str, file: str) -> list[LiteralCall]:
    """Every call with literal arguments in one test module (a file that does not parse has none)."""
    try:
        module = ast.parse(source, filename=file)
    except (SyntaxError, ValueError):
        return []
    module_names = _literal_assignments(
        [s for s in module.body if not isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)], {}
    )
    found = list(_calls_in(module, module_names, file))
    functions = [n for n in ast.walk(module) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    for function in functions:
        local = {**module_names, **_literal_assignments(function.body, module_names)}
        decorators = [call for d in function.decorator_list if (call := _parametrize(d)) is not None]
        tables = [_rows(call, module_names) for call in decorators]
        usable = [rows for rows in tables if rows]
        if local != module_names:
            found.extend(_calls_in(function, local, file))
        if not usable:
            continue
        for count, combination in enumerate(itertools.product(*usable)):
            if count >= MAX_ROWS:
                break
            bound = dict(local)
            for row in combination:
                bound.update(row)
            for statement in function.body:
                found.extend(_calls_in(statement, bound, file))
    return found


def suite_calls(test_files: Sequence[Path], root: Path) -> list[LiteralCall]:
    calls: list[LiteralCall] = []
    for file in test_files:
        try:
            source = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        calls.extend(
            literal_calls(source, file.relative_to(root).as_posix() if file.is_relative_to(root) else str(file))
        )
    return calls


def leaked_inputs(cases: Sequence[HeldOutCase], calls: Sequence[LiteralCall], cases_label: str) -> list[str]:
    """One line per held-out case whose call also appears, with equal literal arguments, in the visible tests."""
    by_function: dict[str, list[LiteralCall]] = {}
    for call in calls:
        by_function.setdefault(call.function, []).append(call)
    problems: list[str] = []
    for case in cases:
        name = case.function.rsplit(".", 1)[-1]
        args, kwargs = _json_like(list(case.args)), _json_like(dict(case.kwargs))
        for call in by_function.get(name, []):
            if list(call.args) == args and dict(call.kwargs) == kwargs:
                problems.append(
                    f"held-out case {case.id!r} ({cases_label}:{case.line}) is also called in the visible tests: "
                    f"{call.file}:{call.line} calls {name} with the same literal arguments; change the case's input"
                )
                break
    return problems
