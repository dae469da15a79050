"""Summaries of a checked journal: balances per account, roll-ups, subtree totals and a printed trial balance."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from ledger.models import account_prefix
from ledger.validate import check_journal


def format_amount(cents: int) -> str:
    """Cents as a decimal amount with thousands separators, e.g. ``-123456 -> "-1,234.56"``."""
    sign = "-" if cents < 0 else ""
    whole, fraction = divmod(abs(cents), 100)
    return f"{sign}{whole:,}.{fraction:02d}"


def balances(entries: Iterable[Mapping[str, Any]], accounts: Collection[str] | None = None) -> dict[str, int]:
    """The balance in cents of every account the journal touches, sorted by account name."""
    totals: dict[str, int] = {}
    for transaction in check_journal(entries, accounts):
        for posting in transaction.postings:
            totals[posting.account] = totals.get(posting.account, 0) + posting.cents
    return dict(sorted(totals.items()))


def _within(account: str, ancestor: str) -> bool:
    return account == ancestor or account.startswith(ancestor + ":")


def subtree_total(entries: Iterable[Mapping[str, Any]], ancestor: str) -> int:
    """The summed balance in cents of ``ancestor`` and every account below it."""
    return sum(cents for account, cents in balances(entries).items() if _within(account, ancestor))


def rollup(entries: Iterable[Mapping[str, Any]], depth: int) -> dict[str, int]:
    """Balances summed up to accounts of at most ``depth`` segments, sorted by account name."""
    totals: dict[str, int] = {}
    for account, cents in balances(entries).items():
        prefix = account_prefix(account, depth)
        totals[prefix] = totals.get(prefix, 0) + cents
    return dict(sorted(totals.items()))


def trial_balance(entries: Iterable[Mapping[str, Any]]) -> list[str]:
    """Printable lines: each non-zero account balance, then the total, which is 0.00 for a sound journal."""
    rows = [(account, cents) for account, cents in balances(entries).items() if cents != 0]
    width = max([len(account) for account, _ in rows] + [len("total")])
    lines = [f"{account:<{width}}  {format_amount(cents):>12}" for account, cents in rows]
    lines.append(f"{'total':<{width}}  {format_amount(sum(cents for _, cents in rows)):>12}")
    return lines
