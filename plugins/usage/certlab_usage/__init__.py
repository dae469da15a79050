"""What real agent CLIs report of their consumption, as ``Usage`` records."""

from certlab_usage.parsers import (
    AIDER_TEXT,
    CLAUDE_JSON,
    CLIENT_ESTIMATE,
    CODEX_JSONL,
    SHAPE_OF_AGENT,
    parse_aider,
    parse_claude_code,
    parse_codex,
    parse_usage,
)

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
