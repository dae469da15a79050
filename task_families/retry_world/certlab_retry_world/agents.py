"""Three versions of one reservation agent: A, B (a slip), C (B repaired).

Each is ``agent(task, tools, rng) -> dict``: for every order it reads the stock, reserves it
unless the task marks it reserved (a reserve refused as "already reserved" counts as reserved)
and confirms, retrying what may pass on a second try. They never decide their own success:
the world's oracle does.

- A retries a reserve that timed out, and a confirm that found the service busy.
- B is A refactored: both calls now go through one ``_with_retries`` helper whose default
  retries only ``ToolUnavailable`` (the confirm's busy error), so a timed-out reserve is no
  longer retried. On a clean run A and B behave the same, and so they do under a timed-out
  reserve in a world where every order is already reserved: no reserve call is made there.
- C is B with the helper's default fixed to retry timeouts as well.

B and C each keep their own copy of the helper on purpose: they stand for two versions of
one agent, so a change to one (as a repair, or an edit before a replay) never moves the other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from certlab_core.plugin import ToolRejected, ToolTimeout, ToolUnavailable

ATTEMPTS = 3


def _already_reserved(error: ToolRejected) -> bool:
    return "already reserved" in str(error)


def _reserve_unless_held(tools: Any, order: Mapping[str, Any]) -> Any:
    """Reserve the order, unless the task says its reservation already exists (then no call is made)."""
    if order.get("reserved"):
        return None
    return tools.call("reserve", order=order["order"], sku=order["sku"], qty=order["qty"])


# --------------------------------------------------------------------------- A: the baseline


def _reserve_a(tools: Any, order: Mapping[str, Any]) -> None:
    for attempt in range(ATTEMPTS):
        try:
            _reserve_unless_held(tools, order)
            return
        except ToolTimeout:
            if attempt == ATTEMPTS - 1:
                raise
        except ToolRejected as error:
            if _already_reserved(error):
                return
            raise


def _confirm_a(tools: Any, order: Mapping[str, Any]) -> None:
    for attempt in range(ATTEMPTS):
        try:
            tools.call("confirm", order=order["order"])
            return
        except ToolUnavailable:
            if attempt == ATTEMPTS - 1:
                raise


def agent_a(task: Mapping[str, Any], tools: Any, rng: Any) -> dict[str, Any]:
    """The baseline: retries a timed-out reserve and a busy confirm."""
    confirmed = 0
    for order in task["orders"]:
        tools.call("stock", sku=order["sku"])
        _reserve_a(tools, order)
        _confirm_a(tools, order)
        confirmed += 1
    return {"confirmed": confirmed}


# --------------------------------------------------------------------------- B: the refactoring slip

RETRYABLE_B: tuple[type[Exception], ...] = (ToolUnavailable,)


def _with_retries_b(call: Callable[[], Any], retry_on: tuple[type[Exception], ...] = RETRYABLE_B) -> Any:
    for attempt in range(ATTEMPTS):
        try:
            return call()
        except retry_on:
            if attempt == ATTEMPTS - 1:
                raise
    return None


def agent_b(task: Mapping[str, Any], tools: Any, rng: Any) -> dict[str, Any]:
    """A refactored around one retry helper, whose default no longer retries a timeout."""
    confirmed = 0
    for order in task["orders"]:
        tools.call("stock", sku=order["sku"])
        try:
            _with_retries_b(partial(_reserve_unless_held, tools, order))
        except ToolRejected as error:
            if not _already_reserved(error):
                raise
        _with_retries_b(partial(tools.call, "confirm", order=order["order"]))
        confirmed += 1
    return {"confirmed": confirmed}


# --------------------------------------------------------------------------- C: B repaired

RETRYABLE_C: tuple[type[Exception], ...] = (ToolUnavailable, ToolTimeout)


def _with_retries_c(call: Callable[[], Any], retry_on: tuple[type[Exception], ...] = RETRYABLE_C) -> Any:
    for attempt in range(ATTEMPTS):
        try:
            return call()
        except retry_on:
            if attempt == ATTEMPTS - 1:
                raise
    return None


def agent_c(task: Mapping[str, Any], tools: Any, rng: Any) -> dict[str, Any]:
    """B with the retry helper's default repaired: timeouts are retried again."""
    confirmed = 0
    for order in task["orders"]:
        tools.call("stock", sku=order["sku"])
        try:
            _with_retries_c(partial(_reserve_unless_held, tools, order))
        except ToolRejected as error:
            if not _already_reserved(error):
                raise
        _with_retries_c(partial(tools.call, "confirm", order=order["order"]))
        confirmed += 1
    return {"confirmed": confirmed}
