"""certlab's Newcombe rule: Wilson score intervals per arm, Newcombe's hybrid score interval for the difference."""

from __future__ import annotations

__version__ = "0.1.0"
