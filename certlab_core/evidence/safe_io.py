"""The hardened readers of hostile files, where the kernel has always imported them from.

They live in the author API (``certlab_core.plugin.safe_io``), so that a plugin reading a file
that may be hostile (the acceptance grader's lock and predictions, a leak scan's run folder)
reads it the kernel's way; the kernel's readers import them from here as before.
"""

from __future__ import annotations

from certlab_core.plugin.safe_io import (
    MAX_BUNDLE_BYTES,
    MAX_DOCUMENT_BYTES,
    MAX_NESTING,
    ErrorType,
    iter_capped_lines,
    line_too_long,
    load_json,
    nesting_depth,
    open_regular,
    opened_regular,
    parse_json,
    parse_line,
    read_capped_bytes,
    read_capped_text,
)

__all__ = [
    "MAX_BUNDLE_BYTES",
    "MAX_DOCUMENT_BYTES",
    "MAX_NESTING",
    "ErrorType",
    "iter_capped_lines",
    "line_too_long",
    "load_json",
    "nesting_depth",
    "open_regular",
    "opened_regular",
    "parse_json",
    "parse_line",
    "read_capped_bytes",
    "read_capped_text",
]
