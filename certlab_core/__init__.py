"""certlab's kernel: the author API, certify and gate engines, the CLI."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
