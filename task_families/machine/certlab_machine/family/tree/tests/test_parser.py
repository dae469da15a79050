"""Visible tests of machine.parser: the shape of the tree, grouping, and parse errors."""

import pytest

from machine.parser import BinOp, Let, Neg, Num, ParseError, Var, parse, parse_sexpr


def test_binary_node_shape():
    assert parse("1 + x") == BinOp("+", Num(1, 0), Var("x", 4), 2)


def test_unary_and_let_node_shapes():
    assert parse("let n = -2 in n") == Let("n", Neg(Num(2, 9), 8), Var("n", 14), 0)


def test_product_binds_tighter_than_sum():
    assert parse_sexpr("1 + 2 * 3") == "(+ 1 (* 2 3))"


def test_remainder_binds_like_product():
    assert parse_sexpr("1 + 6 % 4") == "(+ 1 (% 6 4))"


def test_sum_is_left_associative():
    assert parse_sexpr("a - b + c") == "(+ (- a b) c)"


def test_power_is_right_associative():
    assert parse_sexpr("a ** b ** c") == "(** a (** b c))"


def test_power_binds_tighter_than_negation():
    assert parse_sexpr("-a ** 2") == "(neg (** a 2))"


def test_parentheses_group():
    assert parse_sexpr("(1 + 2) * 3") == "(* (+ 1 2) 3)"


def test_let_body_extends_to_the_end():
    assert parse_sexpr("let x = 1 in x + 1") == "(let x 1 (+ x 1))"


def test_missing_operand_position():
    with pytest.raises(ParseError) as raised:
        parse("1 *")
    assert raised.value.position == 3


def test_unclosed_parenthesis():
    with pytest.raises(ParseError):
        parse("(1 + 2")


def test_trailing_tokens_are_refused():
    with pytest.raises(ParseError):
        parse("1 2")
