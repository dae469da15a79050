"""Half-open integer intervals ``[start, end)``, written as two-element lists ``[start, end]``.

An interval holds every integer ``x`` with ``start <= x < end``; ``start == end`` is the
empty interval. Every function accepts lists or tuples and returns new lists.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

Interval = list[int]


def make(start: int, end: int) -> Interval:
    """Return the interval ``[start, end)``; raise ValueError when ``end < start``."""
    for bound in (start, end):
        if isinstance(bound, bool) or not isinstance(bound, int):
            raise TypeError(f"interval bounds must be integers, got {bound!r}")
    if end < start:
        raise ValueError(f"interval end {end} is before its start {start}")
    return [start, end]


def _bounds(interval: Sequence[int]) -> Interval:
    if len(interval) != 2:
        raise ValueError(f"an interval has exactly two bounds, got {interval!r}")
    return make(interval[0], interval[1])


def length(interval: Sequence[int]) -> int:
    """How many integers the interval holds."""
    start, end = _bounds(interval)
    return end - start


def is_empty(interval: Sequence[int]) -> bool:
    """True when the interval holds no integer."""
    start, end = _bounds(interval)
    return start == end


def contains(interval: Sequence[int], point: int) -> bool:
    """True when ``point`` lies in the interval (the end is excluded)."""
    start, end = _bounds(interval)
    return start <= point < end


def overlaps(a: Sequence[int], b: Sequence[int]) -> bool:
    """True when the two intervals share at least one integer."""
    a_start, a_end = _bounds(a)
    b_start, b_end = _bounds(b)
    return a_start < b_end and b_start < a_end


def intersection(a: Sequence[int], b: Sequence[int]) -> Interval | None:
    """The integers both intervals hold, or None when they share none."""
    if not overlaps(a, b):
        return None
    return make(max(a[0], b[0]), min(a[1], b[1]))


def clamp(point: int, interval: Sequence[int]) -> int:
    """The integer of a non-empty interval nearest to ``point``."""
    start, end = _bounds(interval)
    if start == end:
        raise ValueError(f"cannot clamp into the empty interval {interval!r}")
    return min(max(point, start), end - 1)


def shift(interval: Sequence[int], offset: int) -> Interval:
    """The interval moved by ``offset``."""
    start, end = _bounds(interval)
    return make(start + offset, end + offset)


def merge(intervals: Iterable[Sequence[int]]) -> list[Interval]:
    """The union as sorted, disjoint, non-adjacent, non-empty intervals."""
    merged: list[Interval] = []
    for start, end in sorted(_bounds(interval) for interval in intervals):
        if start == end:
            continue
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def total_length(intervals: Iterable[Sequence[int]]) -> int:
    """How many distinct integers the intervals hold together."""
    return sum(length(interval) for interval in merge(intervals))


def gaps(intervals: Iterable[Sequence[int]]) -> list[Interval]:
    """The holes between the union's pieces, in order."""
    pieces = merge(intervals)
    return [make(previous[1], current[0]) for previous, current in zip(pieces, pieces[1:])]


def span(intervals: Iterable[Sequence[int]]) -> Interval | None:
    """The smallest interval covering every non-empty interval given, or None if there is none."""
    pieces = merge(intervals)
    if not pieces:
        return None
    return make(pieces[0][0], pieces[-1][1])
