"""Evaluates a parsed tree to an integer, with variables bound by the caller and by ``let``.

Arithmetic is on Python integers: ``/`` is floor division, ``%`` its remainder, ``**``
takes a non-negative exponent. A ``let`` binding holds in its body only.
"""

from __future__ import annotations

from collections.abc import Mapping

from machine.parser import BinOp, Let, Neg, Node, Num, Var
from machine.tokenizer import MachineError


class EvalError(MachineError):
    """An expression that parses but has no value; ``kind`` is ``name`` or ``arithmetic``."""

    def __init__(self, message: str, position: int, kind: str) -> None:
        super().__init__(message, position)
        self.kind = kind


def _apply(op: str, left: int, right: int, pos: int) -> int:
    if op == "+":
        return left + right
    if op == "-":
        return left - right
    if op == "*":
        return left * right
    if op in ("/", "%"):
        if right == 0:
            raise EvalError("division by zero", pos, "arithmetic")
        return left // right if op == "/" else left % right
    if op == "**":
        if right < 0:
            raise EvalError("negative exponent", pos, "arithmetic")
        return left**right
    raise EvalError(f"unknown operator {op!r}", pos, "arithmetic")


def _evaluate(node: Node, env: dict[str, int]) -> int:
    if isinstance(node, Num):
        return node.value
    if isinstance(node, Var):
        if node.name not in env:
            raise EvalError(f"unbound name {node.name!r}", node.pos, "name")
        return env[node.name]
    if isinstance(node, Neg):
        return -_evaluate(node.operand, env)
    if isinstance(node, BinOp):
        left = _evaluate(node.left, env)
        right = _evaluate(node.right, env)
        return _apply(node.op, left, right, node.pos)
    value = _evaluate(node.value, env)
    return _evaluate(node.body, {**env, node.name: value})


def evaluate(node: Node, variables: Mapping[str, int] | None = None) -> int:
    """The value of ``node`` with ``variables`` bound; raise EvalError when it has none."""
    return _evaluate(node, dict(variables or {}))
