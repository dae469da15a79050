"""Held-out acceptance cases: the record, and acceptance.jsonl's strict reader.

A line is ``{"id", "call": "module:function", "args", "kwargs", "expect"}``, or ``"raises":
"ExceptionName"`` in place of ``expect``. ``args`` (a list) and ``kwargs`` (an object) may
be left out. The code's result is compared with ``expect`` using ``==`` after it has been
carried back as JSON data (tuples arrive as lists); a ``raises`` case holds when the call
raised an exception of exactly that class name. Anything else on a line is refused with
one message naming the file and the line.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from attrs import field, frozen

from certlab_core.plugin.errors import UsageError
from certlab_core.plugin.types.base import JsonValue
from certlab_core.plugin.types.fields import json_map
from certlab_core.sdk import safe_io

CASE_KEYS = frozenset({"id", "call", "args", "kwargs", "expect", "raises"})
_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
CALL_PATTERN = re.compile(rf"^({_IDENTIFIER}(?:\.{_IDENTIFIER})*):({_IDENTIFIER}(?:\.{_IDENTIFIER})*)$")
RAISES_PATTERN = re.compile(rf"^{_IDENTIFIER}$")
MAX_CASES = 10_000


@frozen
class HeldOutCase:
    """One held-out case. ``expect`` is meaningful only when ``raises`` is None."""

    id: str
    call: str
    args: tuple[JsonValue, ...] = field(converter=tuple)
    kwargs: Mapping[str, JsonValue] = field(converter=json_map)
    expect: JsonValue = None
    raises: str | None = None
    line: int = 0

    @property
    def module(self) -> str:
        return self.call.split(":", 1)[0]

    @property
    def function(self) -> str:
        return self.call.split(":", 1)[1]

    def invocation(self) -> dict[str, Any]:
        """What a case process is given: the call and its arguments, nothing else (no id, no answer)."""
        return {"call": self.call, "args": list(self.args), "kwargs": dict(self.kwargs)}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _where(path: Path | str, line: int) -> str:
    return f"{path}:{line}"


def json_object_line(text: str, where: str, fix: str) -> dict[str, Any]:
    """One line of a JSON-lines file a user or a tool wrote, as an object (NaN and Infinity refused).

    A problem is one UsageError: ``where`` (``path:line``), what is wrong, and ``fix``."""
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except (json.JSONDecodeError, ValueError) as error:
        raise UsageError(f"{where}: not a JSON line ({error}); {fix}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{where}: the line is a JSON {type(data).__name__}, not an object; {fix}")
    return data


def parse_case(text: str, path: Path | str, line: int) -> HeldOutCase:
    """One line of a cases file, checked; a problem raises UsageError naming the file and line."""
    where = _where(path, line)
    fix = "each line must be a JSON object {id, call: 'module:function', args, kwargs, expect or raises}"
    data = json_object_line(text, where, fix)
    unknown = sorted(set(data) - CASE_KEYS)
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; {fix}")
    case_id = data.get("id")
    if not isinstance(case_id, str) or not case_id.strip():
        raise UsageError(f"{where}: 'id' must be a non-empty string; {fix}")
    call = data.get("call")
    if not isinstance(call, str) or not CALL_PATTERN.match(call):
        raise UsageError(f"{where}: case {case_id!r}: 'call' must read 'module:function' (got {call!r})")
    args = data.get("args", [])
    if not isinstance(args, list):
        raise UsageError(f"{where}: case {case_id!r}: 'args' must be a list (got {type(args).__name__})")
    kwargs = data.get("kwargs", {})
    if not isinstance(kwargs, dict):
        raise UsageError(f"{where}: case {case_id!r}: 'kwargs' must be an object (got {type(kwargs).__name__})")
    has_expect, has_raises = "expect" in data, "raises" in data
    if has_expect == has_raises:
        raise UsageError(f"{where}: case {case_id!r}: give exactly one of 'expect' and 'raises'")
    raises = data.get("raises")
    if has_raises and (not isinstance(raises, str) or not RAISES_PATTERN.match(raises)):
        raise UsageError(f"{where}: case {case_id!r}: 'raises' must be an exception class name (got {raises!r})")
    return HeldOutCase(
        id=case_id,
        call=call,
        args=args,
        kwargs=kwargs,
        expect=data.get("expect"),
        raises=raises if has_raises else None,
        line=line,
    )


def parse_cases(text: str, path: Path | str) -> list[HeldOutCase]:
    """Every case of a cases file's text; blank lines are skipped; ids must be unique."""
    cases: list[HeldOutCase] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        case = parse_case(raw, path, number)
        if case.id in seen:
            raise UsageError(
                f"{_where(path, number)}: the case id {case.id!r} was already used on line {seen[case.id]}; "
                "give every case its own id"
            )
        seen[case.id] = number
        cases.append(case)
        if len(cases) > MAX_CASES:
            raise UsageError(f"{path}: more than {MAX_CASES} cases; split the task")
    if not cases:
        raise UsageError(f"{path}: no held-out case in the file; add one JSON line per case")
    return cases


def read_cases_bytes(data: bytes, path: Path | str) -> list[HeldOutCase]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise UsageError(
            f"{_where(path, line)}: not UTF-8 text ({error.reason}); save the cases file as UTF-8"
        ) from None
    return parse_cases(text, path)


def read_cases(path: Path) -> list[HeldOutCase]:
    """The cases of a regular file of at most 16 MB; a missing, unreadable or other file is one line (exit 4)."""
    missing = f"{path}: the held-out cases file does not exist"
    data = safe_io.read_capped_bytes(path, "held-out cases file", UsageError, missing)  # a FIFO never blocks it
    return read_cases_bytes(data, path)


def check_modules(cases: Sequence[HeldOutCase], module_names: Sequence[str], path: Path | str) -> None:
    """Refuse a case whose call is not into one of the modules under test."""
    allowed = set(module_names)
    for case in cases:
        top = case.module.split(".", 1)[0]
        if top not in allowed:
            raise UsageError(
                f"{_where(path, case.line)}: case {case.id!r} calls {case.call}, which is not in the code under test "
                f"(modules: {', '.join(sorted(allowed)) or 'none'})"
            )


def cases_sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
