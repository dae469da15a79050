"""Ledger records: amounts in integer cents, accounts, postings and transactions, parsed from plain dicts.

A journal is a list of entries such as::

    {"id": "t1", "date": "2024-03-01", "description": "rent",
     "postings": [{"account": "expenses:rent", "amount": "950.00"},
                  {"account": "assets:bank"}]}

At most one posting of an entry may leave out its amount; it then takes the amount
that makes the transaction balance (the other postings' sum, negated).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

_AMOUNT = re.compile(r"(-?)(\d+)(?:\.(\d{1,2}))?")


class LedgerError(ValueError):
    """A journal that cannot be read or does not hold together."""


@dataclass(frozen=True)
class Posting:
    """One line of a transaction: an account and a signed amount in cents."""

    account: str
    cents: int


@dataclass(frozen=True)
class Transaction:
    """A dated, identified set of postings."""

    id: str
    date: str
    description: str
    postings: tuple[Posting, ...]

    def total(self) -> int:
        """The sum of the postings in cents; zero when the transaction balances."""
        return sum(posting.cents for posting in self.postings)

    def accounts(self) -> list[str]:
        """The accounts this transaction touches, in posting order, without repeats."""
        return list(dict.fromkeys(posting.account for posting in self.postings))


def parse_amount(text: str) -> int:
    """Read a decimal amount such as ``"12.5"`` or ``"-0.07"`` as integer cents."""
    if not isinstance(text, str):
        raise LedgerError(f"amount must be a string like '12.34', got {text!r}")
    match = _AMOUNT.fullmatch(text.strip())
    if match is None:
        raise LedgerError(f"not an amount: {text!r}")
    sign, whole, fraction = match.groups()
    cents = int(whole) * 100 + int((fraction or "0").ljust(2, "0"))
    return -cents if sign else cents


def parse_account(name: str) -> str:
    """Check an account name (colon-separated, non-empty lower-case segments) and return it."""
    if not isinstance(name, str):
        raise LedgerError(f"account must be a string, got {name!r}")
    segments = name.split(":")
    if any(not segment or segment != segment.strip() or segment != segment.lower() for segment in segments):
        raise LedgerError(f"bad account name: {name!r}")
    return name


def parse_date(text: str) -> str:
    """Check an ISO date ``YYYY-MM-DD`` and return it."""
    try:
        if not isinstance(text, str) or len(text) != 10:
            raise ValueError(text)
        datetime.date.fromisoformat(text)
    except ValueError:
        raise LedgerError(f"not a date (YYYY-MM-DD): {text!r}") from None
    return text


def parse_transaction(entry: Mapping[str, Any]) -> Transaction:
    """Build a Transaction from one journal entry, filling in an elided amount."""
    try:
        identifier = entry["id"]
        date = parse_date(entry["date"])
        raw_postings = entry["postings"]
    except KeyError as missing:
        raise LedgerError(f"entry {entry.get('id', '?')!s} has no {missing.args[0]!r}") from None
    if not isinstance(identifier, str) or not identifier:
        raise LedgerError(f"entry id must be a non-empty string, got {identifier!r}")
    if not isinstance(raw_postings, list) or not all(isinstance(raw, Mapping) and "account" in raw for raw in raw_postings):
        raise LedgerError(f"{identifier}: postings must be a list of objects, each with an account")
    accounts = [parse_account(raw["account"]) for raw in raw_postings]
    amounts = [parse_amount(raw["amount"]) if "amount" in raw else None for raw in raw_postings]
    elided = [index for index, amount in enumerate(amounts) if amount is None]
    if len(elided) > 1:
        raise LedgerError(f"{identifier}: more than one posting leaves out its amount")
    known = sum(amount for amount in amounts if amount is not None)
    postings = tuple(
        Posting(account, -known if amount is None else amount) for account, amount in zip(accounts, amounts)
    )
    return Transaction(identifier, date, str(entry.get("description", "")), postings)


def parse_journal(entries: Iterable[Mapping[str, Any]]) -> list[Transaction]:
    """Parse every entry, in order."""
    return [parse_transaction(entry) for entry in entries]


def account_depth(account: str) -> int:
    """How many segments an account name has."""
    return len(parse_account(account).split(":"))


def account_prefix(account: str, depth: int) -> str:
    """The account's ancestor at ``depth`` segments (the account itself when it is shallower)."""
    if depth < 1:
        raise LedgerError(f"depth must be at least 1, got {depth}")
    return ":".join(parse_account(account).split(":")[:depth])
