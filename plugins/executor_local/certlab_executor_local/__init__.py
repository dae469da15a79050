"""certlab's executor ``local``: each trial a fresh process on this machine."""

from __future__ import annotations

__version__ = "0.1.0"
