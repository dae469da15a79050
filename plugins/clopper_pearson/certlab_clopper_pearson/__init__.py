"""certlab's default statistical rule: exact Clopper-Pearson intervals per arm, bounds on candidate minus baseline."""

from __future__ import annotations

__version__ = "0.1.0"
