"""certlab's Newcombe rule: Wilson intervals per arm, Newcombe's for the gap."""

from __future__ import annotations

__version__ = "0.1.0"
