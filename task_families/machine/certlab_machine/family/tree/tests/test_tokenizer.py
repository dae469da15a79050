"""Visible tests of machine.tokenizer: token kinds, texts and positions, and where errors point."""

import pytest

from machine.tokenizer import Token, TokenizeError, dump, tokenize


def test_numbers_names_and_operators():
    assert tokenize("x1 + 42") == [
        Token("name", "x1", 0),
        Token("op", "+", 3),
        Token("num", "42", 5),
        Token("end", "", 7),
    ]


def test_keywords():
    assert [token.kind for token in tokenize("let a = 1 in a")] == ["keyword", "name", "op", "num", "keyword", "name", "end"]


def test_power_is_one_token():
    assert dump("3 ** 4") == ["0 num 3", "2 op **", "5 num 4", "6 end"]


def test_adjacent_operators_and_parentheses():
    assert [token.text for token in tokenize("(-a)*b")] == ["(", "-", "a", ")", "*", "b", ""]


def test_empty_source_has_only_end():
    assert tokenize("   ") == [Token("end", "", 3)]


def test_unexpected_character_position():
    with pytest.raises(TokenizeError) as raised:
        tokenize("a + ?")
    assert raised.value.position == 4


def test_unexpected_character_at_start():
    with pytest.raises(TokenizeError) as raised:
        tokenize("!x")
    assert raised.value.position == 0


def test_malformed_number():
    with pytest.raises(TokenizeError) as raised:
        tokenize("7x")
    assert raised.value.position == 1
