"""The base every record shares, and the JSON-like types that records carry.

Every record a hook returns, and every value record beside it, is a frozen, slotted attrs class
deriving from :class:`Record`: the registry checks a returned record's type against it, and
``certlab_core.sdk.canonical`` turns any of them into canonical JSON. Closed sets of words are
``Literal`` types (checked when a record is made), every callable a record carries is a
``Protocol`` saying its exact signature, and no public field is ``Any``: JSON-like data is
``JsonValue``, and what a plugin may not look into is ``object``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeAlias

from attrs import frozen

#: JSON-like data: what crosses a tool boundary, a task input, a world's snapshot, a grader's facts.
JsonValue: TypeAlias = "bool | int | float | str | Sequence[JsonValue] | Mapping[str, JsonValue] | None"
JsonObject: TypeAlias = "Mapping[str, JsonValue]"
#: One tool of a built world, called with keyword arguments that match its own signature (so no
#: Protocol can say more than this); it refuses with a boundary exception.
Tool: TypeAlias = "Callable[..., JsonValue]"


@frozen
class Record:
    """The base of every certlab record: frozen, slotted, compared by value, with no fields of its own."""
