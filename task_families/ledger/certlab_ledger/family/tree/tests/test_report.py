"""Visible tests of ledger.report: formatting, balances, roll-ups, subtree totals and the trial balance."""

import pytest

from ledger.models import LedgerError
from ledger.report import balances, format_amount, rollup, subtree_total, trial_balance

JOURNAL = [
    {
        "id": "p1",
        "date": "2024-05-01",
        "description": "pay",
        "postings": [{"account": "assets:bank", "amount": "3000.00"}, {"account": "income:salary"}],
    },
    {
        "id": "p2",
        "date": "2024-05-01",
        "description": "bonus",
        "postings": [{"account": "assets:bank", "amount": "250.00"}, {"account": "income:salary-bonus"}],
    },
    {
        "id": "p3",
        "date": "2024-05-02",
        "description": "lunch",
        "postings": [
            {"account": "expenses:food:lunch", "amount": "12.40"},
            {"account": "expenses:food:coffee", "amount": "3.10"},
            {"account": "assets:cash", "amount": "-15.50"},
        ],
    },
]


def test_format_amount():
    assert format_amount(123456) == "1,234.56"
    assert format_amount(7) == "0.07"


def test_format_negative_amount():
    assert format_amount(-1550) == "-15.50"


def test_balances():
    assert balances(JOURNAL) == {
        "assets:bank": 325000,
        "assets:cash": -1550,
        "expenses:food:coffee": 310,
        "expenses:food:lunch": 1240,
        "income:salary": -300000,
        "income:salary-bonus": -25000,
    }


def test_balances_refuse_an_unbalanced_journal():
    lopsided = [{"id": "x", "date": "2024-05-03", "postings": [{"account": "a", "amount": "1.00"}, {"account": "b", "amount": "1.00"}]}]
    with pytest.raises(LedgerError):
        balances(lopsided)


def test_rollup_to_top_level():
    assert rollup(JOURNAL, 1) == {"assets": 323450, "expenses": 1550, "income": -325000}


def test_rollup_to_second_level():
    assert rollup(JOURNAL, 2) == {
        "assets:bank": 325000,
        "assets:cash": -1550,
        "expenses:food": 1550,
        "income:salary": -300000,
        "income:salary-bonus": -25000,
    }


def test_subtree_total():
    assert subtree_total(JOURNAL, "expenses:food") == 1550
    assert subtree_total(JOURNAL, "income:salary") == -300000


def test_trial_balance():
    assert trial_balance(JOURNAL) == [
        "assets:bank               3,250.00",
        "assets:cash                 -15.50",
        "expenses:food:coffee          3.10",
        "expenses:food:lunch          12.40",
        "income:salary            -3,000.00",
        "income:salary-bonus        -250.00",
        "total                         0.00",
    ]
