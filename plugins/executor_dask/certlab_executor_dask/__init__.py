"""certlab's Dask executor: each trial a Dask task, in a fresh process."""

from __future__ import annotations

__version__ = "0.1.0"
