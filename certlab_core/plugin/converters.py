"""Typed converters for record fields: each takes any mapping and keeps a plain ``dict`` of the same types.

attrs calls a field's converter with whatever the caller passed; a typed function (not a
lambda) lets the type checker see the types the record's ``__init__`` accepts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from certlab_core.plugin.records import JsonValue, Tool


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


def callable_map(value: Mapping[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
    return dict(value)


def loose_map(value: Mapping[str, Any]) -> dict[str, Any]:
    """For the kernel's own records whose values are checked where they are read (never a plugin's record)."""
    return dict(value)
