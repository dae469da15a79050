"""Visible tests of machine.api: values, and the error records with their 1-based columns."""

import pytest

from machine.api import calculate, run, run_all


def test_calculate():
    assert calculate("(1 + 2) * (3 + 4)") == 21


def test_calculate_with_variables():
    assert calculate("w - 1", {"w": 10}) == 9


def test_calculate_refuses_non_integer_variables():
    with pytest.raises(ValueError):
        calculate("v", {"v": 1.5})


def test_run_ok():
    assert run("2 ** 5") == {"ok": True, "value": 32}


def test_run_reports_a_bad_character_column():
    assert run("2 * #") == {"ok": False, "error": "syntax", "message": "unexpected character '#'", "column": 5}


def test_run_reports_a_parse_error_column():
    assert run("(4 + )")["column"] == 6


def test_run_reports_an_unbound_name():
    assert run("1 + zz") == {"ok": False, "error": "name", "message": "unbound name 'zz'", "column": 5}


def test_run_reports_division_by_zero():
    assert run("8 % 0")["error"] == "arithmetic"


def test_run_all():
    assert run_all(["n", "n + n"], {"n": 4}) == [{"ok": True, "value": 4}, {"ok": True, "value": 8}]
