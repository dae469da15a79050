"""The inventory world: orders to reserve and confirm, confirms sometimes busy.

The task lists each order with ``reserved``: true when its reservation already exists, so it
needs only a confirm. Whether a trial reserves anything at all is the environment's doing:
with the default input (two orders, each already reserved with probability 0.82) about two
worlds in three need no reserve call, and a fault on ``reserve`` never fires there.

Tools (keyword arguments):

- ``stock(sku)`` -> ``{"sku", "available"}``;
- ``reserve(order, sku, qty)`` -> ``{"order", "reservation"}``; refuses (``ToolRejected``) an
  unknown order, a wrong sku or quantity, an order that is already reserved
  (message ``"order o-2 is already reserved"``) and a quantity above the stock;
- ``confirm(order)`` -> ``{"order", "confirmed": true}``; refuses an order without a
  reservation; a share of calls fail with ``ToolUnavailable`` (the service is busy).

The decision channel answers ``"reserved? ORDER"`` with ``yes`` or ``no`` (confidence 0.9).
The oracle passes when every order is reserved with its sku and quantity and confirmed,
and the stock equals the initial stock less what was reserved. Everything is deterministic
in (task input, seed).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from certlab_core.plugin import ToolRejected, ToolUnavailable, UsageError, WorldInstance
from certlab_core.plugin.types.tool_world import OracleVerdict

# Chosen from expected values, before any experiment's seeds were run: a world needs no reserve call
# with probability 0.82 ** 2 = 0.67, and a confirm fails three times running with probability 0.1 ** 3.
DEFAULT_INPUT: dict[str, Any] = {
    "orders": 2,
    "existing_share": 0.82,
    "flaky_confirm_rate": 0.1,
    "skus": ["widget", "gadget", "gizmo"],
}
TOOLS = ("stock", "reserve", "confirm")
INSTRUCTIONS = (
    "Reserve and confirm every order. An order marked reserved already holds its reservation: "
    "confirm it only. The confirm service is sometimes busy."
)


def check_input(task_input: Mapping[str, Any]) -> None:
    """Refuse unknown keys and bad values in the task input (UsageError, one line)."""
    for key in task_input:
        if key not in DEFAULT_INPUT:
            raise UsageError(f"the retry world has no input {key!r}; its inputs: {', '.join(DEFAULT_INPUT)}")
    merged = {**DEFAULT_INPUT, **task_input}
    orders = merged["orders"]
    if isinstance(orders, bool) or not isinstance(orders, int) or not 1 <= orders <= 1000:
        raise UsageError(f"orders must be a whole number from 1 to 1000, got {orders!r}")
    for key in ("existing_share", "flaky_confirm_rate"):
        value = merged[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
            raise UsageError(f"{key} must be a number from 0 to 1, got {value!r}")
    skus = merged["skus"]
    if not isinstance(skus, list) or not skus or not all(isinstance(s, str) and s for s in skus):
        raise UsageError("skus must be a non-empty list of names")
    if len(set(skus)) != len(skus):
        raise UsageError("skus must not repeat a name")


def build(task_input: Mapping[str, Any], seed: int) -> WorldInstance:
    """A fresh world for one trial, the same for the same input and seed."""
    settings = {**DEFAULT_INPUT, **task_input}
    rng = random.Random(f"retry-world/{seed}")
    flaky = random.Random(f"retry-world/{seed}/confirm")
    skus: list[str] = list(settings["skus"])
    orders: list[dict[str, Any]] = []
    for n in range(1, int(settings["orders"]) + 1):
        orders.append({"order": f"o-{n}", "sku": rng.choice(skus), "qty": rng.randint(1, 3)})
    demand = {sku: sum(o["qty"] for o in orders if o["sku"] == sku) for sku in skus}
    initial = {sku: demand[sku] + rng.randint(0, 3) for sku in skus}
    stock = dict(initial)
    reservations: dict[str, dict[str, Any]] = {}
    for order in orders:
        if rng.random() < float(settings["existing_share"]):
            reservations[order["order"]] = {"sku": order["sku"], "qty": order["qty"], "confirmed": False}
            stock[order["sku"]] -= order["qty"]
    by_id = {o["order"]: o for o in orders}
    state = {"rejected_reserves": 0, "busy_confirms": 0}

    def stock_tool(sku: str) -> dict[str, Any]:
        if sku not in stock:
            raise ToolRejected(f"no sku {sku!r}")
        return {"sku": sku, "available": stock[sku]}

    def reserve(order: str, sku: str, qty: int) -> dict[str, Any]:
        wanted = by_id.get(order)
        if wanted is None:
            raise ToolRejected(f"no order {order!r}")
        if wanted["sku"] != sku or wanted["qty"] != qty:
            raise ToolRejected(f"order {order} is for {wanted['qty']} {wanted['sku']}")
        if order in reservations:
            state["rejected_reserves"] += 1
            raise ToolRejected(f"order {order} is already reserved")
        if stock[sku] < qty:
            raise ToolRejected(f"out of stock: {stock[sku]} {sku} left")
        stock[sku] -= qty
        reservations[order] = {"sku": sku, "qty": qty, "confirmed": False}
        return {"order": order, "reservation": f"r-{order}"}

    def confirm(order: str) -> dict[str, Any]:
        held = reservations.get(order)
        if held is None:
            raise ToolRejected(f"order {order} has no reservation")
        if flaky.random() < float(settings["flaky_confirm_rate"]):
            state["busy_confirms"] += 1
            raise ToolUnavailable("confirm: the service is busy, try again")
        held["confirmed"] = True
        return {"order": order, "confirmed": True}

    def model(question: str, options: tuple[str, ...], _rng: Any) -> dict[str, Any]:
        if question.startswith("reserved? "):
            answer = "yes" if question[len("reserved? ") :] in reservations else "no"
            choice = answer if answer in options else (options[0] if options else answer)
            return {"choice": choice, "confidence": 0.9}
        return {"choice": options[0] if options else "", "confidence": 0.5}

    def snapshot() -> dict[str, Any]:
        return {
            "orders": [dict(o) for o in orders],
            "reservations": {k: dict(v) for k, v in sorted(reservations.items())},
            "stock": dict(sorted(stock.items())),
            "initial_stock": dict(sorted(initial.items())),
            "rejected_reserves": state["rejected_reserves"],
            "busy_confirms": state["busy_confirms"],
        }

    held = set(reservations)
    return WorldInstance(
        task={"instructions": INSTRUCTIONS, "orders": [{**o, "reserved": o["order"] in held} for o in orders]},
        tools={"stock": stock_tool, "reserve": reserve, "confirm": confirm},
        snapshot=snapshot,
        model=model,
    )


def oracle(task: Mapping[str, Any], snapshot: Any) -> OracleVerdict:
    """Every order reserved as ordered and confirmed, and the stock accounts for exactly those reservations."""
    problems = []
    reservations = snapshot["reservations"]
    for order in snapshot["orders"]:
        held = reservations.get(order["order"])
        if held is None:
            problems.append(f"{order['order']} not reserved")
        elif (held["sku"], held["qty"]) != (order["sku"], order["qty"]):
            problems.append(f"{order['order']} reserved as {held['qty']} {held['sku']}")
        elif not held["confirmed"]:
            problems.append(f"{order['order']} not confirmed")
    for sku, initial in snapshot["initial_stock"].items():
        reserved = sum(r["qty"] for r in reservations.values() if r["sku"] == sku)
        if snapshot["stock"][sku] != initial - reserved or snapshot["stock"][sku] < 0:
            problems.append(f"stock of {sku} does not account for its reservations")
    if len(snapshot["orders"]) != len(task["orders"]):
        problems.append("the world's orders differ from the task's")
    return OracleVerdict(passed=not problems, detail="; ".join(problems))
