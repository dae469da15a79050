"""certlab's plain-text reporter: what ``certlab report`` prints by default."""

from __future__ import annotations

__version__ = "0.1.0"
