"""The certlab CLI run in a fresh interpreter, as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


def run_certlab(
    *args: str, cwd: Path | None = None, env: Mapping[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """Run ``certlab ARGS`` (``python -m certlab_core.cli``) and return it finished, its output as text.

    Every suite's helpers call this one: the kernel's tests and each distribution's own, so that a
    plugin's commands are tested the way a user meets them. A non-zero exit is returned, not raised.
    """
    return subprocess.run(
        [sys.executable, "-m", "certlab_core.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=None if env is None else dict(env),
        timeout=timeout,
        check=False,
    )
