"""The interpreter's front door: evaluate source text, or run it and get a result record with a 1-based column."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from machine.evaluator import EvalError, evaluate
from machine.parser import ParseError, parse
from machine.tokenizer import MachineError, TokenizeError


def calculate(source: str, variables: Mapping[str, int] | None = None) -> int:
    """The value of the expression ``source``; raise the interpreter's error when it has none."""
    for name, value in (variables or {}).items():
        if not name.isidentifier() or isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"variables must map names to integers, got {name!r}: {value!r}")
    return evaluate(parse(source), variables)


def _failure(kind: str, error: MachineError) -> dict[str, Any]:
    return {"ok": False, "error": kind, "message": error.message, "column": error.position + 1}


def run(source: str, variables: Mapping[str, int] | None = None) -> dict[str, Any]:
    """``{"ok": True, "value": N}``, or ``{"ok": False, "error": KIND, "message": ..., "column": C}``.

    KIND is ``syntax`` (the text is not an expression), ``name`` (an unbound name) or
    ``arithmetic`` (division by zero, negative exponent); C is the 1-based column the
    error points at.
    """
    try:
        value = calculate(source, variables)
    except (TokenizeError, ParseError) as error:
        return _failure("syntax", error)
    except EvalError as error:
        return _failure(error.kind, error)
    return {"ok": True, "value": value}


def run_all(sources: list[str], variables: Mapping[str, int] | None = None) -> list[dict[str, Any]]:
    """``run`` on each source in turn, each with the same variables."""
    return [run(source, variables) for source in sources]
