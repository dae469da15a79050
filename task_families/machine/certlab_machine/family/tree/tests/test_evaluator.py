"""Visible tests of machine.evaluator on parsed expressions: arithmetic, variables and let scoping."""

import pytest

from machine.evaluator import EvalError, evaluate
from machine.parser import parse


def value(source, variables=None):
    return evaluate(parse(source), variables)


def test_precedence():
    assert value("2 + 3 * 4") == 14


def test_remainder_precedence():
    assert value("1 + 9 % 5") == 5


def test_subtraction_is_left_associative():
    assert value("20 - 5 - 3") == 12


def test_division_is_left_associative():
    assert value("64 / 4 / 2") == 8


def test_power_is_right_associative():
    assert value("2 ** 2 ** 3") == 256


def test_power_binds_tighter_than_product():
    assert value("3 * 2 ** 3") == 24


def test_negation():
    assert value("-3 ** 2") == -9


def test_variables():
    assert value("a * b", {"a": 6, "b": 7}) == 42


def test_let():
    assert value("let s = 5 in s * s") == 25


def test_let_shadows_and_restores():
    assert value("let k = 1 in (let k = 10 in k) + k") == 11


def test_let_binding_does_not_leak():
    with pytest.raises(EvalError) as raised:
        value("(let t = 3 in t) * t")
    assert raised.value.kind == "name"


def test_caller_variables_are_not_changed():
    variables = {"q": 2}
    assert value("let q = 9 in q", variables) == 9
    assert variables == {"q": 2}


def test_division_by_zero():
    with pytest.raises(EvalError) as raised:
        value("5 / (2 - 2)")
    assert raised.value.kind == "arithmetic"
    assert raised.value.position == 2
