"""certlab's Dask executor: each trial a task on a Dask distributed cluster, each still in a fresh process there."""

from __future__ import annotations

__version__ = "0.1.0"
