"""certlab's mutation proof: every family's mutants, made and graded."""

from __future__ import annotations

__version__ = "0.1.0"
