"""certlab's kernel: hook specs, records, seals, discovery, the trial engine and the CLI."""

from __future__ import annotations

import pluggy

__all__ = ["__version__", "hookimpl"]

__version__ = "0.1.0"

hookimpl = pluggy.HookimplMarker("certlab")
