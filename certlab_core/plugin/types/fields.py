"""Typed converters for record fields, and the check of a ``Literal``'s word.

Each converter takes any mapping and keeps a plain ``dict`` of the same types. attrs calls a
field's converter with whatever the caller passed; a typed function (not a lambda) lets the
type checker see the types the record's ``__init__`` accepts. ``one_of`` checks a ``Literal``
field when a record is made, as the type checker cannot for code that is not type-checked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import attrs

    from certlab_core.plugin.types.base import JsonValue, Tool


def text_map(value: Mapping[str, str]) -> dict[str, str]:
    return dict(value)


def count_map(value: Mapping[str, int]) -> dict[str, int]:
    return dict(value)


def json_map(value: Mapping[str, JsonValue]) -> dict[str, JsonValue]:
    return dict(value)


def names_map(value: Mapping[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    return dict(value)


def tool_map(value: Mapping[str, Tool]) -> dict[str, Tool]:
    return dict(value)


def loose_map(value: Mapping[str, Any]) -> dict[str, Any]:
    """For the kernel's own records whose values are checked where they are read (never a plugin's record)."""
    return dict(value)


def one_of(words: tuple[str, ...]) -> Callable[[object, attrs.Attribute[Any], object], None]:
    """An attrs validator for a ``Literal`` field: a word outside ``words`` is one ValueError naming the field
    and the valid words (``AgentOutcome.status must be one of completed, timeout, ...; got 'done'``)."""

    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, str) or value not in words:
            raise ValueError(
                f"{type(instance).__name__}.{attribute.name} must be one of {', '.join(words)}; got {value!r}"
            )

    return check
