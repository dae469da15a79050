"""certlab's Markdown reporter: a run store as a CI job summary page."""

from __future__ import annotations

__version__ = "0.1.0"
