"""Canonical JSON for records, read strictly, and the seals over it."""

from __future__ import annotations

import functools
import hashlib
import json
import types
import typing
from collections.abc import Iterator, Mapping, MutableMapping, MutableSequence, Sequence
from typing import Any, Union

import attrs
import cattrs

converter = cattrs.Converter()

_ARRAYS = (list, tuple, Sequence, MutableSequence)
_OBJECTS = (dict, Mapping, MutableMapping)
_KINDS = {str: "text", int: "an integer", float: "a number", bool: "true or false"}


class ShapeError(ValueError):
    """A document whose value is not the JSON kind its record's field declares, named by where it is."""


def unstructure(obj: Any) -> Any:
    """Turn attrs records (and containers of them) into plain JSON-able data."""
    return converter.unstructure(obj)


def structure(data: Any, cls: Any, where: str = "") -> Any:
    """Build a record of type ``cls`` from plain data; raises on a wrong shape (:class:`ShapeError` on a wrong kind).

    Every document certlab reads can be hostile, and cattrs alone is lenient: it reads text where a
    list belongs as its letters, a list or a number where text belongs as its ``str()``, and any
    value where a flag belongs as its truth. So each value must first be the JSON kind its field
    declares (text for ``str``, an integer for ``int``, true or false for ``bool``, an array for a
    sequence, an object for a mapping or a record); keys a record does not declare are not read.
    ``where`` names the document in the error (``trials[3]``: ``trials[3].repeat: expected ...``).
    """
    problem = _kind_problem(data, cls, where)
    if problem is not None:
        raise ShapeError(problem)
    return converter.structure(data, cls)


def _kind_problem(value: Any, cls: Any, where: str) -> str | None:
    """Where in ``value`` something is not the JSON kind ``cls`` declares, and what it is; None when all are."""
    origin = typing.get_origin(cls)
    if origin is Union or origin is types.UnionType:
        problems = [_kind_problem(value, member, where) for member in typing.get_args(cls)]
        return None if None in problems else next(p for p in problems if p is not None)
    at = where or "the document"
    if cls is type(None):
        return None if value is None else f"{at}: expected null, found {_kind_of(value)}"
    if cls in _KINDS:
        fits = type(value) in (int, float) if cls is float else type(value) is cls
        return None if fits else f"{at}: expected {_KINDS[cls]}, found {_kind_of(value)}"
    if isinstance(cls, type) and attrs.has(cls):
        shape = "record"
    elif origin in _ARRAYS or cls in (list, tuple):
        shape = "array"
    elif origin in _OBJECTS or cls is dict:
        shape = "mapping"
    else:  # Any, object, Literal words and enums (cattrs checks them), unresolved forward references (JSON values)
        return None
    if shape != "array" and not isinstance(value, dict):
        return f"{at}: expected an object, found {_kind_of(value)}"
    if shape == "array" and not isinstance(value, (list, tuple)):
        return f"{at}: expected an array, found {_kind_of(value)}"
    args = typing.get_args(cls)
    if shape == "array" and origin is tuple and args and args[-1] is not Ellipsis and len(args) != len(value):
        return f"{at}: expected {len(args)} items, found {len(value)}"
    parts = _parts(value, cls, where, shape, args)
    return next((p for item, declared, inner in parts if (p := _kind_problem(item, declared, inner))), None)


def _parts(value: Any, cls: Any, where: str, shape: str, args: tuple[Any, ...]) -> Iterator[tuple[Any, Any, str]]:
    """Each value inside a record, an array or a mapping, with the type its place declares and where it is."""
    if shape == "record":
        for name, declared in _field_types(cls):
            if name in value:
                yield value[name], declared, f"{where}.{name}" if where else name
    elif shape == "array":
        homogeneous = not args or args[-1] is Ellipsis or typing.get_origin(cls) is not tuple
        for index, item in enumerate(value):
            yield item, ((args[0] if args else Any) if homogeneous else args[index]), f"{where}[{index}]"
    elif len(args) == 2:  # a mapping's keys, then its values (a bare ``dict`` declares neither)
        for key, item in value.items():
            yield key, args[0], f"{where} key"
            yield item, args[1], f"{where}[{key!r}]"


@functools.cache
def _field_types(cls: type) -> tuple[tuple[str, Any], ...]:
    """A record class's fields and their declared types, resolved once (an unresolvable one is left to cattrs)."""
    try:
        hints = typing.get_type_hints(cls)
    except (NameError, TypeError):
        hints = {}
    return tuple((f.name, hints.get(f.name, Any)) for f in attrs.fields(cls))


def _kind_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    for kinds, said in (((list, tuple), "an array"), ((dict,), "an object"), ((str,), "text")):
        if isinstance(value, kinds):
            return said
    return "a number" if isinstance(value, (int, float)) else type(value).__name__


def canonical_json(data: Any) -> bytes:
    """The one canonical byte form: sorted keys, no spaces, UTF-8, NaN refused."""
    return json.dumps(
        unstructure(data), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def seal_of(document: dict[str, Any], seal_key: str = "seal") -> str:
    """sha256 of the canonical JSON of ``document`` without its ``seal_key``."""
    body = {k: v for k, v in document.items() if k != seal_key}
    return sha256_hex(canonical_json(body))


def sealed(document: dict[str, Any], seal_key: str = "seal") -> dict[str, Any]:
    """A copy of ``document`` with its seal set."""
    out = dict(document)
    out[seal_key] = seal_of(document, seal_key)
    return out


def seal_holds(document: dict[str, Any], seal_key: str = "seal") -> bool:
    """Whether ``document``'s seal is that of its content; never, when the content has no canonical form (NaN...).

    Every file certlab reads can be hostile: a document certlab could not have sealed fails here,
    instead of raising from the canonical encoder.
    """
    if not isinstance(document.get(seal_key), str):
        return False
    try:
        return bool(document[seal_key] == seal_of(document, seal_key))
    except (TypeError, ValueError):
        return False


def pretty_json(data: Any) -> str:
    """Readable JSON for files people open; its canonical form is what gets sealed."""
    return json.dumps(unstructure(data), sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
