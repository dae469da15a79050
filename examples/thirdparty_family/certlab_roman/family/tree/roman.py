"""Roman numerals for the integers 1 to 3999: conversion both ways, validation, ordering and ranges.

Only canonical numerals are accepted: the shortest subtractive form that ``to_roman``
writes, in capitals (``"XIV"``, never ``"XIIII"``, ``"IVX"`` or ``"xiv"``).
"""

from __future__ import annotations

MIN_VALUE = 1
MAX_VALUE = 3999

# Every value a run of symbols can stand for, largest first, subtractive pairs included.
NUMERALS: tuple[tuple[int, str], ...] = (
    (1000, "M"),
    (900, "CM"),
    (500, "D"),
    (400, "CD"),
    (100, "C"),
    (90, "XC"),
    (50, "L"),
    (40, "XL"),
    (10, "X"),
    (9, "IX"),
    (5, "V"),
    (4, "IV"),
    (1, "I"),
)

SYMBOL_VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}


def to_roman(number: int) -> str:
    """The canonical numeral for ``number``; TypeError for a non-integer, ValueError outside 1..3999."""
    if isinstance(number, bool) or not isinstance(number, int):
        raise TypeError(f"only integers have numerals, got {number!r}")
    if not MIN_VALUE <= number <= MAX_VALUE:
        raise ValueError(f"{number} is outside {MIN_VALUE}..{MAX_VALUE}")
    parts = []
    remainder = number
    for value, symbols in NUMERALS:
        count, remainder = divmod(remainder, value)
        parts.append(symbols * count)
    return "".join(parts)


def from_roman(numeral: str) -> int:
    """The integer a canonical numeral stands for; TypeError for a non-string, ValueError for anything else."""
    if not isinstance(numeral, str):
        raise TypeError(f"a numeral is a string, got {numeral!r}")
    if not numeral:
        raise ValueError("the empty string is not a numeral")
    total = 0
    for index, symbol in enumerate(numeral):
        if symbol not in SYMBOL_VALUES:
            raise ValueError(f"{numeral!r} holds {symbol!r}, which is not a Roman symbol")
        value = SYMBOL_VALUES[symbol]
        following = SYMBOL_VALUES.get(numeral[index + 1], 0) if index + 1 < len(numeral) else 0
        if value < following:
            total -= value
        else:
            total += value
    if not MIN_VALUE <= total <= MAX_VALUE or to_roman(total) != numeral:
        raise ValueError(f"{numeral!r} is not a canonical numeral")
    return total


def is_roman(numeral: object) -> bool:
    """True when ``numeral`` is a canonical numeral."""
    try:
        from_roman(numeral)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return True


def compare(a: str, b: str) -> int:
    """-1, 0 or 1 as the numeral ``a`` stands for less than, as much as, or more than ``b``."""
    left, right = from_roman(a), from_roman(b)
    return (left > right) - (left < right)


def add(a: str, b: str) -> str:
    """The numeral of the sum of two numerals; ValueError when the sum passes 3999."""
    return to_roman(from_roman(a) + from_roman(b))


def numeral_range(first: str, last: str) -> list[str]:
    """Every numeral from ``first`` to ``last``, both included, ascending; empty when ``last`` is below ``first``."""
    start, stop = from_roman(first), from_roman(last)
    return [to_roman(number) for number in range(start, stop + 1)]
