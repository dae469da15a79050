"""Checks that a journal holds together: readable entries, balanced transactions, unique ids, dates in order."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from ledger.models import LedgerError, Transaction, parse_transaction


def transaction_problems(transaction: Transaction, accounts: Collection[str] | None = None) -> list[str]:
    """What is wrong with one transaction on its own, one message each; empty when nothing is."""
    problems = []
    if len(transaction.postings) < 2:
        problems.append(f"{transaction.id}: needs at least two postings")
    if transaction.total() != 0:
        problems.append(f"{transaction.id}: does not balance (off by {transaction.total()} cents)")
    if accounts is not None:
        for account in transaction.accounts():
            if account not in accounts:
                problems.append(f"{transaction.id}: unknown account {account}")
    return problems


def journal_problems(entries: Iterable[Mapping[str, Any]], accounts: Collection[str] | None = None) -> list[str]:
    """Every problem of a journal, in entry order: unreadable entries, bad transactions, repeats, disorder."""
    problems: list[str] = []
    seen_ids: set[str] = set()
    previous_date = ""
    for position, entry in enumerate(entries, start=1):
        try:
            transaction = parse_transaction(entry)
        except (LedgerError, KeyError, TypeError) as error:
            problems.append(f"entry {position}: {error}")
            continue
        problems.extend(transaction_problems(transaction, accounts))
        if transaction.id in seen_ids:
            problems.append(f"{transaction.id}: duplicate id")
        seen_ids.add(transaction.id)
        if transaction.date < previous_date:
            problems.append(f"{transaction.id}: out of order ({transaction.date} after {previous_date})")
        previous_date = max(previous_date, transaction.date)
    return problems


def is_valid(entries: Iterable[Mapping[str, Any]], accounts: Collection[str] | None = None) -> bool:
    """True when the journal has no problem at all."""
    return not journal_problems(entries, accounts)


def check_journal(entries: Iterable[Mapping[str, Any]], accounts: Collection[str] | None = None) -> list[Transaction]:
    """The journal's transactions; raise LedgerError listing every problem when there is any."""
    entries = list(entries)
    problems = journal_problems(entries, accounts)
    if problems:
        raise LedgerError("; ".join(problems))
    return [parse_transaction(entry) for entry in entries]
