"""``--sandbox none`` is this distribution's record, chosen by name; without it, one line says what to install."""

from __future__ import annotations

import os
from pathlib import Path

from certlab_core._runtime.registry import discover
from certlab_core.plugin import Sandbox
from certlab_core.testing import run_certlab


def test_the_none_record_is_discovered_and_declares_that_it_does_not_contain() -> None:
    registry = discover()
    record = registry.get(Sandbox, "none")
    assert registry.plugin_of(Sandbox, "none").distribution == "certlab-sandbox-none"
    assert record.contains is False and record.auto_order is None and record.probe() is None


def test_left_out_sandbox_none_is_refused_in_one_line_before_anything_runs(tmp_path: Path) -> None:
    env = {**os.environ, "CERTLAB_PLUGINS": "intervals,calibration,policy,suite,executor-local"}
    out = tmp_path / "certification"
    done = run_certlab("certify", "-f", "intervals", "-a", "null", "--sandbox", "none", "-o", str(out), env=env)
    assert done.returncode == 4 and not (out / "bundle.json").exists()
    assert done.stderr.splitlines() == [
        "certlab: error: --sandbox none: the sandbox 'none' is certlab-sandbox-none's, installed but left out by "
        "CERTLAB_PLUGINS; add sandbox-none to CERTLAB_PLUGINS"
    ]
