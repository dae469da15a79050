"""certlab's HTML reporter: one self-contained page with inline SVG plots."""

from __future__ import annotations

__version__ = "0.1.0"
