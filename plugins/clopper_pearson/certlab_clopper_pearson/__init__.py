"""certlab's default rule: exact Clopper-Pearson per arm, bounds on the gap."""

from __future__ import annotations

__version__ = "0.1.0"
