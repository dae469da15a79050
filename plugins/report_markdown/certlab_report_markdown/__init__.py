"""certlab's Markdown reporter: a run store as a page, short enough for a CI job summary."""

from __future__ import annotations

__version__ = "0.1.0"
