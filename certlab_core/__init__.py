"""certlab's kernel: the author API (``certlab_core.plugin``), the engines that certify and gate, and the CLI."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
