"""Visible tests of ledger.validate: balance, ids, order and accounts."""

import pytest

from ledger.models import LedgerError
from ledger.validate import check_journal, is_valid, journal_problems

SALARY = {
    "id": "t1",
    "date": "2024-03-01",
    "description": "salary",
    "postings": [{"account": "assets:bank", "amount": "2500.00"}, {"account": "income:salary"}],
}
RENT = {
    "id": "t2",
    "date": "2024-03-01",
    "description": "rent",
    "postings": [{"account": "expenses:rent", "amount": "900.00"}, {"account": "assets:bank", "amount": "-900.00"}],
}
GROCERIES = {
    "id": "t3",
    "date": "2024-03-04",
    "description": "groceries",
    "postings": [{"account": "expenses:food", "amount": "61.15"}, {"account": "assets:bank"}],
}


def test_sound_journal_has_no_problems():
    assert journal_problems([SALARY, RENT, GROCERIES]) == []
    assert is_valid([SALARY, RENT, GROCERIES])


def test_left_out_amount_balances_the_transaction():
    assert journal_problems([GROCERIES]) == []


def test_unbalanced_transaction_is_reported():
    lopsided = {**RENT, "postings": [{"account": "expenses:rent", "amount": "900.00"}, {"account": "assets:bank", "amount": "-899.99"}]}
    assert journal_problems([lopsided]) == ["t2: does not balance (off by 1 cents)"]


def test_single_posting_is_reported():
    lonely = {"id": "t9", "date": "2024-03-02", "postings": [{"account": "assets:bank", "amount": "0.00"}]}
    assert journal_problems([lonely]) == ["t9: needs at least two postings"]


def test_duplicate_id_is_reported():
    again = {**GROCERIES, "id": "t1"}
    assert journal_problems([SALARY, again]) == ["t1: duplicate id"]


def test_same_day_entries_are_in_order():
    assert journal_problems([SALARY, RENT]) == []


def test_earlier_date_after_later_is_out_of_order():
    assert journal_problems([GROCERIES, RENT]) == ["t2: out of order (2024-03-01 after 2024-03-04)"]


def test_unknown_account_is_reported():
    chart = ["assets:bank", "income:salary", "expenses:rent"]
    assert journal_problems([SALARY, RENT, GROCERIES], chart) == ["t3: unknown account expenses:food"]


def test_unreadable_entry_is_reported_by_position():
    assert journal_problems([SALARY, {"id": "t5", "date": "March", "postings": []}]) == [
        "entry 2: not a date (YYYY-MM-DD): 'March'"
    ]


def test_check_journal_returns_transactions():
    assert [transaction.id for transaction in check_journal([SALARY, RENT, GROCERIES])] == ["t1", "t2", "t3"]


def test_check_journal_raises_with_every_problem():
    with pytest.raises(LedgerError, match="t1: duplicate id"):
        check_journal([SALARY, SALARY])
