"""Typed documents: attrs records from untrusted JSON or YAML, and their schema.

The attrs classes are the one source of a document's shape: :func:`parse` checks data
against them (an unknown key, a wrong type, a missing key, each reported with its path and
what to do) and :func:`json_schema` derives the JSON Schema from the same classes. Field
documentation lives in ``metadata={"doc": ...}``.
"""

from __future__ import annotations

import difflib
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, Union

import attrs

DOC = "doc"


class Problems:
    """The errors found in one document, each ``(path, message)``."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def add(self, path: str, message: str) -> None:
        self.items.append((path or "(top level)", message))

    def __bool__(self) -> bool:
        return bool(self.items)

    def lines(self, source: str) -> list[str]:
        return [f"{source}: {path}: {message}" for path, message in self.items]


_HINTS: dict[type, dict[str, Any]] = {}


def hints(cls: type) -> dict[str, Any]:
    """The resolved type of each field of the attrs class ``cls``."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _describe(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, str):
        return f"the text {value[:60]!r}"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return f"a {type(value).__name__}"


def type_name(tp: Any) -> str:
    """How a type reads in an error message."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return "any value"
    if tp is type(None):
        return "null"
    if tp is str:
        return "text"
    if tp is int:
        return "a whole number"
    if tp is float:
        return "a number"
    if tp is bool:
        return "true or false"
    if attrs.has(tp):
        return "a mapping"
    if origin is Literal:
        return "one of " + ", ".join(repr(v) for v in typing.get_args(tp))
    if origin in (list, tuple):
        return f"a list of {type_name(typing.get_args(tp)[0])}"
    if origin in (dict, Mapping):
        return f"a mapping of text to {type_name(typing.get_args(tp)[1])}"
    if origin in (Union, types.UnionType):
        return " or ".join(type_name(a) for a in typing.get_args(tp))
    return str(tp)


def _fits(tp: Any, value: Any) -> bool:
    """A cheap check that ``value`` could be ``tp`` (used to choose among a union's members)."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return True
    if tp is type(None):
        return value is None
    if tp is str:
        return isinstance(value, str)
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if attrs.has(tp) or origin in (dict, Mapping):
        return isinstance(value, Mapping)
    if origin in (list, tuple):
        return isinstance(value, list | tuple)
    if origin is Literal:
        return any(value == v and type(value) is type(v) for v in typing.get_args(tp))
    return False


def convert(tp: Any, value: Any, path: str, problems: Problems) -> Any:
    """``value`` as ``tp`` (attrs records built, lists as tuples), or None after recording a problem."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        members = typing.get_args(tp)
        for member in members:
            if _fits(member, value):
                return convert(member, value, path, problems)
        problems.add(path, f"expected {type_name(tp)}, got {_describe(value)}")
        return None
    if attrs.has(tp):
        return parse_record(tp, value, path, problems)
    if origin is Literal:
        allowed = typing.get_args(tp)
        if not _fits(tp, value):
            close = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.add(path, f"{_describe(value)} is not one of {', '.join(repr(a) for a in allowed)}{hint}")
            return None
        return value
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            problems.add(path, f"expected {type_name(tp)}, got {_describe(value)}")
            return None
        item = typing.get_args(tp)[0]
        return tuple(convert(item, v, _join(path, i), problems) for i, v in enumerate(value))
    if origin in (dict, Mapping):
        if not isinstance(value, Mapping):
            problems.add(path, f"expected {type_name(tp)}, got {_describe(value)}")
            return None
        _key_type, value_type = typing.get_args(tp)
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                problems.add(path, f"the key {key!r} is not text; quote it")
                continue
            out[key] = convert(value_type, item, _join(path, key), problems)
        return out
    if not _fits(tp, value):
        problems.add(path, f"expected {type_name(tp)}, got {_describe(value)}")
        return None
    if tp is float:
        number = float(value)
        if not math.isfinite(number):
            problems.add(path, f"expected a finite number, got {value!r}")
            return None
        return number
    return value


def parse_record(cls: type, data: Any, path: str, problems: Problems) -> Any:
    """Build the attrs record ``cls`` from a mapping; unknown and missing keys are problems."""
    if not isinstance(data, Mapping):
        problems.add(
            path, f"expected a mapping with keys {', '.join(f.name for f in attrs.fields(cls))}, got {_describe(data)}"
        )
        return None
    fields = {f.name: f for f in attrs.fields(cls)}
    types_of = hints(cls)
    before = len(problems.items)
    for key in data:
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            problems.add(_join(path, str(key)), f"unknown key; {hint}valid keys: {', '.join(fields)}")
    values: dict[str, Any] = {}
    for name, f in fields.items():
        if name in data:
            values[f.alias or name] = convert(types_of[name], data[name], _join(path, name), problems)
        elif f.default is attrs.NOTHING:
            doc = f.metadata.get(DOC, "")
            problems.add(_join(path, name), f"missing; add it ({type_name(types_of[name])}{': ' + doc if doc else ''})")
    if len(problems.items) > before:
        return None
    try:
        return cls(**values)
    except (TypeError, ValueError) as error:
        problems.add(path, str(error))
        return None


def parse(cls: type, data: Any, source: str) -> tuple[Any, list[str]]:
    """``(record, [])`` or ``(None, error lines)``; each line reads ``SOURCE: PATH: what is wrong; what to do``."""
    problems = Problems()
    record = parse_record(cls, data, "", problems)
    return (record, []) if not problems else (None, problems.lines(source))


# --------------------------------------------------------------------------- JSON Schema


def _schema_of(tp: Any, definitions: dict[str, Any]) -> dict[str, Any]:
    origin = typing.get_origin(tp)
    if tp is Any:
        return {}
    if tp is type(None):
        return {"type": "null"}
    if tp is str:
        return {"type": "string"}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is float:
        return {"type": "number"}
    if attrs.has(tp):
        name = tp.__name__
        if name not in definitions:
            definitions[name] = {}
            definitions[name] = record_schema(tp, definitions)
        return {"$ref": f"#/$defs/{name}"}
    if origin is Literal:
        return {"enum": list(typing.get_args(tp))}
    if origin in (list, tuple):
        return {"type": "array", "items": _schema_of(typing.get_args(tp)[0], definitions)}
    if origin in (dict, Mapping):
        return {"type": "object", "additionalProperties": _schema_of(typing.get_args(tp)[1], definitions)}
    if origin in (Union, types.UnionType):
        return {"anyOf": [_schema_of(a, definitions) for a in typing.get_args(tp)]}
    raise TypeError(f"no JSON Schema for {tp!r}")


def _default(value: Any) -> Any:
    from certlab_core.sdk.canonical import unstructure

    return unstructure(value)


def record_schema(cls: type, definitions: dict[str, Any]) -> dict[str, Any]:
    """The JSON Schema object of one attrs class (its nested classes go to ``definitions``)."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    types_of = hints(cls)
    for f in attrs.fields(cls):
        prop = dict(_schema_of(types_of[f.name], definitions))
        if f.metadata.get(DOC):
            prop["description"] = f.metadata[DOC]
        if f.default is attrs.NOTHING:
            required.append(f.name)
        else:
            default = f.default.factory() if isinstance(f.default, attrs.Factory) else f.default  # type: ignore[arg-type]
            prop["default"] = _default(default)
        properties[f.name] = prop
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    if cls.__doc__:
        schema["description"] = " ".join(cls.__doc__.split())
    return schema


def json_schema(cls: type, schema_id: str, title: str) -> dict[str, Any]:
    """The complete JSON Schema (draft 2020-12) of documents shaped like the attrs class ``cls``."""
    definitions: dict[str, Any] = {}
    body = record_schema(cls, definitions)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": schema_id,
        "title": title,
        **body,
        **({"$defs": dict(sorted(definitions.items()))} if definitions else {}),
    }
