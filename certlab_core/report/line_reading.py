"""Reading a trial line's parts for the report, fast and as hostile input."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from certlab_core.gate.events import boundary_marks, well_formed_marks
from certlab_core.gate.store import MARKS_KEY
from certlab_core.plugin.report import ARMS
from certlab_core.plugin.types.agent import Usage


def _count(value: Any) -> int | None:
    """A token count as reported: a whole number (a finite float is truncated), else None (bools, NaN, text)."""
    if type(value) is int:
        return value
    if type(value) is float and math.isfinite(value):
        return int(value)
    return None


def _amount(value: Any) -> float | None:
    """A dollar amount as reported: a finite number, else None."""
    if type(value) is float:
        return value if math.isfinite(value) else None
    return float(value) if type(value) is int else None


def usage_of(line: Mapping[str, Any]) -> Usage | None:
    """The trial's usage report as the kernel's record (None when it reported nothing)."""
    return usage_record(line.get("usage"))


def usage_record(usage: Any) -> Usage | None:
    """A usage value read from a line as the kernel's record (None when it is not an object)."""
    if type(usage) is not dict and not isinstance(usage, Mapping):  # JSON gives dicts: the ABC check is the slow one
        return None
    source = usage.get("cost_source")
    return Usage(
        str(usage.get("shape") or "unstated"),
        _count(usage.get("input_tokens")),
        _count(usage.get("output_tokens")),
        _count(usage.get("cached_input_tokens")),
        _amount(usage.get("cost_usd")),
        None if source is None else str(source),
    )


def well_formed(line: Any) -> bool:
    """Whether a parsed line has the shapes the report reads (docs/run-store.md)."""
    if not isinstance(line, Mapping) or not isinstance(line.get("id"), str) or line.get("arm") not in ARMS:
        return False
    attempt, index = line.get("attempt"), line.get("index")
    if not isinstance(attempt, int) or not isinstance(index, int) or isinstance(attempt, bool):
        return False
    events, faults = line.get("events") or [], line.get("faults") or []
    if not isinstance(events, list) or not all(isinstance(e, Mapping) for e in events):
        return False
    if not isinstance(faults, list) or not all(isinstance(f, Mapping) for f in faults):
        return False
    return isinstance(line.get("condition"), str) and line.get("outcome") in ("success", "failure", "error")


UNREAD = object()
_DECODER = json.JSONDecoder()
_MARKS_START = "}" + MARKS_KEY + "["  # the end of a line's ``_gate`` summary and the start of its ``_marks``
_MARKS_END = '],"'  # the end of the ``_marks`` list (the first ``],"`` after it starts)
_MARKS_START_BYTES, _MARKS_END_BYTES = _MARKS_START.encode(), _MARKS_END.encode()
_USAGE_KEY = ',"usage":'
_USAGE_KEY_BYTES = _USAGE_KEY.encode()
NO_USAGE = ',"usage":null}'
NO_USAGE_BYTES = NO_USAGE.encode()
_USAGE_WINDOW = 4096  # bytes of a line's end searched for its usage (a longer usage is read whole)


def _whole_json(text: str, otherwise: Any) -> Any:
    """The JSON value ``text`` holds whole (nothing before or after it), else ``otherwise``.

    ``raw_decode`` with an end check: ``json.loads`` would also run a whitespace pattern over
    the end, which costs as much again on the short values read here for every line.
    Undecodable bytes reach here as lone surrogates, which no JSON value holds outside a
    string; inside one they are refused below.
    """
    try:
        value, end = _DECODER.raw_decode(text)
    except (ValueError, RecursionError):
        return otherwise
    if end != len(text) or (not text.isascii() and _has_surrogate(text)):
        return otherwise
    return value


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def raw_marks(raw: str | bytes) -> list[str]:
    """A sealed line's boundary marks: its ``_marks`` list right after its ``_gate`` summary, else made from its events.

    The list is found without decoding the summary: neither ``},"_marks":[`` nor ``],"``
    can occur inside a JSON string, and the summary seal_line writes holds no object, so
    the first of the one and the first of the other after it bracket the list. (A sealed
    line is trusted for its marks as for its summary; a hand-made line that nests objects
    in its summary is fingerprinted from whatever ``_marks`` it carries, which changes no
    verdict.)
    """
    if isinstance(raw, bytes):
        start = raw.find(_MARKS_START_BYTES)
        end = raw.find(_MARKS_END_BYTES, start)
    else:
        start = raw.find(_MARKS_START)
        end = raw.find(_MARKS_END, start)
    if 0 < start < end:
        piece = raw[start + len(_MARKS_START) - 1 : end + 1]
        marks = _whole_json(piece.decode("utf-8", "surrogateescape") if isinstance(piece, bytes) else piece, None)
        if well_formed_marks(marks):
            return list(marks)  # checked just above
    try:
        line = json.loads(raw)
    except (ValueError, RecursionError):
        return []
    return boundary_marks(line.get("events")) if isinstance(line, dict) else []


def last_usage(raw: str | bytes) -> Any:
    """A canonical trial line's ``usage`` value: its last key (keys are sorted), read without parsing the line.

    The value found after the last ``,"usage":`` is the top-level one exactly when it runs to
    the line's closing brace (a nested one would be followed by more closing braces);
    otherwise ``UNREAD``, and the line is read whole.
    """
    if isinstance(raw, bytes):  # only the value is decoded, and only from the line's last _USAGE_WINDOW bytes
        if raw.endswith(NO_USAGE_BYTES):
            return None
        at = raw.rfind(_USAGE_KEY_BYTES, max(0, len(raw) - _USAGE_WINDOW))
        ends = raw.endswith(b"}")
    else:
        if raw.endswith(NO_USAGE):
            return None
        at = raw.rfind(_USAGE_KEY)
        ends = raw.endswith("}")
    if at < 0 or not ends:
        return UNREAD
    value = raw[at + len(_USAGE_KEY) : -1]
    return _whole_json(value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value, UNREAD)
