"""What real agent CLIs report of their own consumption, read into the kernel's ``Usage`` record."""

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
