"""Helpers for the kernel's report and re-derive tests: the archived stores and the real CLI."""

from __future__ import annotations

from pathlib import Path

from certlab_core.testing import run_certlab  # noqa: F401  (the tests import it from here)

REPO = Path(__file__).resolve().parents[2]
ARCHIVED = REPO / "tests" / "archived_stores"
STORES = {"block": "BLOCK", "inconclusive": "INCONCLUSIVE", "error": "ERROR"}
