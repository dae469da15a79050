"""Visible tests of the intervals module."""

import pytest

from intervals import (
    clamp,
    contains,
    gaps,
    intersection,
    is_empty,
    length,
    make,
    merge,
    overlaps,
    shift,
    span,
    total_length,
)


def test_make_returns_list():
    assert make(2, 5) == [2, 5]


def test_make_rejects_reversed_bounds():
    with pytest.raises(ValueError):
        make(5, 2)


def test_make_rejects_non_integers():
    with pytest.raises(TypeError):
        make(1.5, 3)


def test_length_counts_integers():
    assert length([2, 5]) == 3


def test_length_of_empty_is_zero():
    assert length([4, 4]) == 0


def test_is_empty():
    assert is_empty((7, 7))
    assert not is_empty((7, 8))


def test_contains_start():
    assert contains([1, 4], 1)


def test_contains_excludes_end():
    assert not contains([1, 4], 4)


def test_contains_outside():
    assert not contains([1, 4], 0)


def test_overlaps_sharing_integers():
    assert overlaps([0, 5], [3, 8])


def test_adjacent_intervals_do_not_overlap():
    assert not overlaps([0, 5], [5, 8])


def test_intersection_of_overlapping():
    assert intersection([0, 5], [3, 8]) == [3, 5]


def test_intersection_of_disjoint_is_none():
    assert intersection([0, 2], [6, 8]) is None


def test_clamp_inside_is_unchanged():
    assert clamp(3, [1, 6]) == 3


def test_clamp_below_goes_to_start():
    assert clamp(-2, [1, 6]) == 1


def test_clamp_above_goes_to_last_integer():
    assert clamp(9, [1, 6]) == 5


def test_clamp_into_empty_is_refused():
    with pytest.raises(ValueError):
        clamp(0, [2, 2])


def test_shift():
    assert shift([1, 3], -4) == [-3, -1]


def test_merge_overlapping_and_unsorted():
    assert merge([[6, 9], [1, 4], [3, 5]]) == [[1, 5], [6, 9]]


def test_merge_joins_adjacent():
    assert merge([[1, 3], [3, 6]]) == [[1, 6]]


def test_merge_drops_empty():
    assert merge([[1, 3], [8, 8]]) == [[1, 3]]


def test_total_length_counts_overlap_once():
    assert total_length([[0, 4], [2, 6]]) == 6


def test_gaps_between_pieces():
    assert gaps([[0, 2], [5, 7], [9, 10]]) == [[2, 5], [7, 9]]


def test_span():
    assert span([[4, 6], [0, 1]]) == [0, 6]


def test_span_of_nothing():
    assert span([]) is None
