"""Visible tests of ledger.models: amounts, accounts, dates and transactions."""

import pytest

from ledger.models import (
    LedgerError,
    Posting,
    account_depth,
    account_prefix,
    parse_account,
    parse_amount,
    parse_date,
    parse_journal,
    parse_transaction,
)


def test_amount_whole_and_cents():
    assert parse_amount("12.34") == 1234


def test_amount_without_fraction():
    assert parse_amount("7") == 700


def test_amount_with_one_fraction_digit():
    assert parse_amount("2.5") == 250


def test_negative_amount():
    assert parse_amount("-3.05") == -305


def test_amount_rejects_three_fraction_digits():
    with pytest.raises(LedgerError):
        parse_amount("1.005")


def test_amount_rejects_numbers():
    with pytest.raises(LedgerError):
        parse_amount(12)


def test_account_names():
    assert parse_account("assets:bank:checking") == "assets:bank:checking"
    with pytest.raises(LedgerError):
        parse_account("assets::bank")
    with pytest.raises(LedgerError):
        parse_account("Assets")


def test_dates():
    assert parse_date("2024-02-29") == "2024-02-29"
    with pytest.raises(LedgerError):
        parse_date("2023-02-29")


def test_transaction_with_explicit_amounts():
    transaction = parse_transaction(
        {
            "id": "t1",
            "date": "2024-01-05",
            "description": "coffee",
            "postings": [
                {"account": "expenses:food", "amount": "3.20"},
                {"account": "assets:cash", "amount": "-3.20"},
            ],
        }
    )
    assert transaction.postings == (Posting("expenses:food", 320), Posting("assets:cash", -320))
    assert transaction.total() == 0
    assert transaction.accounts() == ["expenses:food", "assets:cash"]


def test_only_one_amount_may_be_left_out():
    entry = {
        "id": "t2",
        "date": "2024-01-06",
        "postings": [{"account": "expenses:food"}, {"account": "assets:cash"}],
    }
    with pytest.raises(LedgerError):
        parse_transaction(entry)


def test_entry_without_date_is_refused():
    with pytest.raises(LedgerError):
        parse_transaction({"id": "t3", "postings": []})


def test_journal_keeps_order():
    entries = [
        {"id": "b", "date": "2024-01-02", "postings": []},
        {"id": "a", "date": "2024-01-01", "postings": []},
    ]
    assert [transaction.id for transaction in parse_journal(entries)] == ["b", "a"]


def test_account_depth_and_prefix():
    assert account_depth("expenses:food:lunch") == 3
    assert account_prefix("expenses:food:lunch", 2) == "expenses:food"
    assert account_prefix("assets", 3) == "assets"
