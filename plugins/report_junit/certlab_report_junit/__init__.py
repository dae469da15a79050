"""certlab's JUnit XML reporter: one test case per condition, so any CI test view shows the gate."""

from __future__ import annotations

__version__ = "0.1.0"
