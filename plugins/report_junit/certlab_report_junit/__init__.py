"""certlab's JUnit XML reporter: a test case per condition, for CI views."""

from __future__ import annotations

__version__ = "0.1.0"
