"""Visible tests of the roman module."""

import pytest

from roman import add, compare, from_roman, is_roman, numeral_range, to_roman


def test_to_roman_of_small_numbers():
    assert [to_roman(n) for n in (1, 2, 3, 5, 6, 10)] == ["I", "II", "III", "V", "VI", "X"]


def test_to_roman_uses_subtractive_pairs():
    assert to_roman(4) == "IV"
    assert to_roman(9) == "IX"
    assert to_roman(44) == "XLIV"
    assert to_roman(1994) == "MCMXCIV"


def test_to_roman_of_the_largest_number():
    assert to_roman(3999) == "MMMCMXCIX"


def test_to_roman_rejects_numbers_outside_the_range():
    with pytest.raises(ValueError):
        to_roman(0)
    with pytest.raises(ValueError):
        to_roman(4000)


def test_to_roman_rejects_non_integers():
    with pytest.raises(TypeError):
        to_roman(2.0)
    with pytest.raises(TypeError):
        to_roman(True)


def test_from_roman_of_repeated_symbols():
    assert from_roman("III") == 3
    assert from_roman("XX") == 20
    assert from_roman("MMM") == 3000


def test_from_roman_of_subtractive_pairs():
    assert from_roman("IV") == 4
    assert from_roman("XC") == 90
    assert from_roman("MCMXCIV") == 1994


def test_from_roman_rejects_non_canonical_numerals():
    for numeral in ("IIII", "VV", "IL", "XM"):
        with pytest.raises(ValueError):
            from_roman(numeral)


def test_from_roman_rejects_foreign_symbols_and_empty():
    for numeral in ("", "ABC", "xiv"):
        with pytest.raises(ValueError):
            from_roman(numeral)


def test_round_trip_over_the_first_hundred():
    for number in range(1, 101):
        assert from_roman(to_roman(number)) == number


def test_is_roman():
    assert is_roman("XIV")
    assert not is_roman("XIIII")
    assert not is_roman(14)


def test_compare_orders_by_value():
    assert compare("V", "X") == -1
    assert compare("X", "V") == 1
    assert compare("IX", "IX") == 0


def test_add():
    assert add("II", "III") == "V"
    assert add("XX", "XX") == "XL"


def test_add_rejects_sums_past_the_range():
    with pytest.raises(ValueError):
        add("MMM", "M")


def test_numeral_range_includes_both_ends():
    assert numeral_range("I", "V") == ["I", "II", "III", "IV", "V"]


def test_numeral_range_of_one_and_of_none():
    assert numeral_range("X", "X") == ["X"]
    assert numeral_range("X", "V") == []
