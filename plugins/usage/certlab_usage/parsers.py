"""A real agent CLI's report of its own consumption, read as ``Usage``.

Three report shapes are understood, each from the CLI's stdout:

- ``claude-json``: Claude Code's ``--output-format json`` result object (or the last ``result``
  line of ``stream-json``): ``total_cost_usd`` and ``usage`` with cache reads and writes.
- ``codex-jsonl``: Codex's ``exec --json`` lines; the ``usage`` of every ``turn.completed`` is
  summed. Codex reports no dollars.
- ``aider-text``: aider's ``Tokens: N sent, M received. Cost: $X message, $Y session.`` lines;
  tokens are summed over the lines, dollars are the last session figure.

In every shape ``input_tokens`` counts all prompt tokens the CLI reported, cached ones included,
and ``cached_input_tokens`` is the part read from a cache. Dollar figures are the CLI's own
estimate from its own price table (``cost_source="client-estimate"``), never a bill.

A parser never raises on what it is given: output with no report gives None, a report with
missing or nonsensical fields gives a `Usage` with those fields None.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from certlab_core.plugin import UsageError
from certlab_core.plugin.types.agent import Usage

CLAUDE_JSON = "claude-json"
CODEX_JSONL = "codex-jsonl"
AIDER_TEXT = "aider-text"
CLIENT_ESTIMATE = "client-estimate"

__all__ = [
    "AIDER_TEXT",
    "CLAUDE_JSON",
    "CLIENT_ESTIMATE",
    "CODEX_JSONL",
    "SHAPE_OF_AGENT",
    "parse_aider",
    "parse_claude_code",
    "parse_codex",
    "parse_usage",
]

# A report larger than this is not a CLI's usage report; only its tail is read.
_MAX_CHARS = 4_000_000


# --------------------------------------------------------------------------- checked values


def _count(value: Any) -> int | None:
    """A token count: a non-negative integer (an integral float is accepted), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and math.isfinite(value) and value >= 0 and value.is_integer():
        return int(value)
    return None


def _dollars(value: Any) -> float | None:
    """A dollar figure: a finite, non-negative number, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        dollars = float(value)
    except OverflowError:
        return None
    return dollars if math.isfinite(dollars) and dollars >= 0 else None


def _sum_all(values: Iterable[int | None]) -> int | None:
    """The sum when every value is known, else None (a total is never claimed from part of it)."""
    total = 0
    for value in values:
        if value is None:
            return None
        total += value
    return total


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _usage_or_none(usage: Usage) -> Usage | None:
    figures = (usage.input_tokens, usage.output_tokens, usage.cached_input_tokens, usage.cost_usd)
    return None if all(figure is None for figure in figures) else usage


def _tail(stdout: Any) -> str | None:
    if not isinstance(stdout, str):
        return None
    return stdout[-_MAX_CHARS:]


# --------------------------------------------------------------------------- Claude Code


def _claude_result(text: str) -> Mapping[str, Any] | None:
    """The ``type: result`` object: the whole output, the last of a JSON array, or the last JSON line."""

    def last_result(candidates: Iterable[Any]) -> Mapping[str, Any] | None:
        for candidate in candidates:
            if isinstance(candidate, dict) and candidate.get("type") == "result":
                return candidate
        return None

    whole = _json(text.strip()) if text.strip()[:1] in ("{", "[") else None
    if isinstance(whole, dict):
        return last_result([whole])
    if isinstance(whole, list):
        return last_result(reversed(whole))
    lines = (line.strip() for line in reversed(text.splitlines()))
    return last_result(_json(line) for line in lines if line.startswith("{"))


def _claude_tokens(usage: Mapping[str, Any], names: tuple[str, str, str, str]) -> tuple[int | None, ...]:
    uncached, cache_read, cache_write, output = (usage.get(name) for name in names)
    uncached_n, output_n = _count(uncached), _count(output)
    read_n = _count(cache_read) if cache_read is not None else 0
    write_n = _count(cache_write) if cache_write is not None else 0
    total_in = None if uncached_n is None or read_n is None or write_n is None else uncached_n + read_n + write_n
    cached = _count(cache_read) if cache_read is not None else None
    return total_in, output_n, cached


def parse_claude_code(stdout: str) -> Usage | None:
    """Claude Code's ``--output-format json`` (or ``stream-json``) report, shape ``claude-json``.

    ``input_tokens`` is input plus cache reads plus cache writes (Anthropic counts cache reads
    and writes apart from input); ``cached_input_tokens`` is the cache reads; ``cost_usd`` is
    ``total_cost_usd``. Tokens are summed over the per-model ``modelUsage`` entries, the ones
    the CLI prices ``total_cost_usd`` from; the top-level ``usage`` is read only when there are
    none: Claude Code 2.1 leaves ``usage`` at zero when its turns fell back to non-streaming
    answers, while ``modelUsage`` and the cost still count them.
    """
    text = _tail(stdout)
    if text is None:
        return None
    result = _claude_result(text)
    if result is None:
        return None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached: int | None = None
    usage = result.get("usage")
    model_usage = result.get("modelUsage")
    models = list(model_usage.values()) if isinstance(model_usage, dict) else []
    models = [entry for entry in models if isinstance(entry, dict)]
    if models:
        names = ("inputTokens", "cacheReadInputTokens", "cacheCreationInputTokens", "outputTokens")
        per_model = [_claude_tokens(entry, names) for entry in models]
        input_tokens = _sum_all(figures[0] for figures in per_model)
        output_tokens = _sum_all(figures[1] for figures in per_model)
        cached = _sum_all(figures[2] for figures in per_model)
    elif isinstance(usage, dict):
        names = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens", "output_tokens")
        input_tokens, output_tokens, cached = _claude_tokens(usage, names)
    cost = _dollars(result.get("total_cost_usd"))
    if cost is None and "total_cost_usd" not in result and models:
        costs = [_dollars(entry.get("costUSD")) for entry in models]
        cost = None if any(c is None for c in costs) else math.fsum(c for c in costs if c is not None)
    return _usage_or_none(
        Usage(
            shape=CLAUDE_JSON,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cached_input_tokens=cached,
            cost_usd=cost,
            cost_source=CLIENT_ESTIMATE if cost is not None else None,
        )
    )


# --------------------------------------------------------------------------- Codex


def parse_codex(stdout: str) -> Usage | None:
    """Codex's ``exec --json`` lines, shape ``codex-jsonl``: every ``turn.completed`` usage, summed.

    Codex's ``input_tokens`` already includes ``cached_input_tokens``, and its ``output_tokens``
    already includes ``reasoning_output_tokens`` (the OpenAI convention). No dollar figure.
    A run whose turns all failed (``turn.failed``) reports nothing: None.
    """
    text = _tail(stdout)
    if text is None:
        return None
    turns: list[Mapping[str, Any]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        event = _json(line)
        if isinstance(event, dict) and event.get("type") == "turn.completed" and isinstance(event.get("usage"), dict):
            turns.append(event["usage"])
    if not turns:
        return None
    return _usage_or_none(
        Usage(
            shape=CODEX_JSONL,
            input_tokens=_sum_all(_count(turn.get("input_tokens")) for turn in turns),
            output_tokens=_sum_all(_count(turn.get("output_tokens")) for turn in turns),
            cached_input_tokens=_sum_all(_count(turn.get("cached_input_tokens")) for turn in turns),
        )
    )


# --------------------------------------------------------------------------- aider

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
# Between two words aider's console may wrap the line (it wraps at the terminal width).
_GAP = r"(?:[ \t]+|[ \t]*\r?\n[ \t]*)"
_TOKENS = r"(\d{1,12}(?:\.\d{1,3})?k?)"
_DOLLARS = r"\$(\d{1,12}(?:\.\d{1,12})?)"
_AIDER_REPORT = re.compile(
    rf"^[ \t]*Tokens:{_GAP}{_TOKENS}{_GAP}sent,"
    rf"(?:{_GAP}{_TOKENS}{_GAP}cache{_GAP}write,)?"
    rf"(?:{_GAP}{_TOKENS}{_GAP}cache{_GAP}hit,)?"
    rf"{_GAP}{_TOKENS}{_GAP}received\."
    rf"(?:{_GAP}Cost:{_GAP}{_DOLLARS}{_GAP}message,{_GAP}{_DOLLARS}{_GAP}session\.)?",
    re.MULTILINE,
)


def _aider_tokens(figure: str | None) -> int | None:
    """aider's rounded token figure: ``850``, ``2.3k`` (2300), ``13k`` (13000)."""
    if figure is None:
        return None
    if figure.endswith("k"):
        return round(float(figure[:-1]) * 1000)
    if "." in figure:
        return None
    return int(figure)


def parse_aider(stdout: str) -> Usage | None:
    """aider's closing report lines, shape ``aider-text``.

    aider prints one ``Tokens:`` line per model request, with that request's figures; the
    parser sums ``sent`` (aider's count includes cache writes), ``cache hit`` and ``received``
    over the lines, and takes the dollars from the last ``session`` figure. aider rounds what it
    prints: tokens to 100 from 1k and to 1000 from 10k, dollars to the cent from $0.01. It prints
    ``cache hit`` only when non-zero, so no such part gives ``cached_input_tokens`` None; no
    ``Cost:`` part (aider knows no price for the model) gives ``cost_usd`` None.
    """
    text = _tail(stdout)
    if text is None:
        return None
    text = _ANSI.sub("", text)
    sent: list[int | None] = []
    received: list[int | None] = []
    hits: list[int] = []
    session: float | None = None
    found = False
    for match in _AIDER_REPORT.finditer(text):
        found = True
        sent_figure, _write, hit_figure, received_figure, _message_cost, session_cost = match.groups()
        sent.append(_aider_tokens(sent_figure))
        received.append(_aider_tokens(received_figure))
        hit = _aider_tokens(hit_figure)
        if hit is not None:
            hits.append(hit)
        if session_cost is not None:
            session = _dollars(float(session_cost))
    if not found:
        return None
    return _usage_or_none(
        Usage(
            shape=AIDER_TEXT,
            input_tokens=_sum_all(sent),
            output_tokens=_sum_all(received),
            cached_input_tokens=sum(hits) if hits else None,
            cost_usd=session,
            cost_source=CLIENT_ESTIMATE if session is not None else None,
        )
    )


# --------------------------------------------------------------------------- by name

_PARSERS: dict[str, Callable[[str], Usage | None]] = {
    CLAUDE_JSON: parse_claude_code,
    CODEX_JSONL: parse_codex,
    AIDER_TEXT: parse_aider,
}

# The report shape each agent CLI prints, by the names an adapter may use for it.
SHAPE_OF_AGENT: dict[str, str] = {
    "claude-code": CLAUDE_JSON,
    "claude": CLAUDE_JSON,
    "codex": CODEX_JSONL,
    "aider": AIDER_TEXT,
}


def parse_usage(shape_or_agent: str, stdout: str) -> Usage | None:
    """Parse ``stdout`` by report shape (``claude-json``, ``codex-jsonl``, ``aider-text``) or agent name."""
    shape = SHAPE_OF_AGENT.get(shape_or_agent, shape_or_agent)
    parser = _PARSERS.get(shape)
    if parser is None:
        known = ", ".join(sorted([*_PARSERS, *SHAPE_OF_AGENT]))
        raise UsageError(f"unknown usage report shape or agent {shape_or_agent!r}: use one of {known}")
    return parser(stdout)
