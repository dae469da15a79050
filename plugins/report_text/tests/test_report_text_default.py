"""``certlab report`` without ``--format`` asks for the ``text`` reporter by name, and says what to install."""

from __future__ import annotations

import os
from pathlib import Path

from certlab_report_text.render import render_text

from certlab_core._runtime.registry import discover
from certlab_core.report.reading import load_report
from certlab_core.testing import run_certlab

BLOCK_STORE = Path(__file__).resolve().parents[3] / "tests" / "archived_stores" / "block"


def test_report_prints_the_text_reporters_render_byte_for_byte() -> None:
    report, _rule = load_report(BLOCK_STORE, discover(), (1, 2, 4))
    done = run_certlab("report", str(BLOCK_STORE))
    assert done.returncode == 0, done.stderr
    assert done.stdout == render_text(report)
    assert run_certlab("report", str(BLOCK_STORE), "--format", "text").stdout == done.stdout


def test_without_the_text_reporter_report_names_its_distribution_in_one_line() -> None:
    env = {**os.environ, "CERTLAB_PLUGINS": "clopper-pearson,rule-support"}
    done = run_certlab("report", str(BLOCK_STORE), env=env)
    assert done.returncode == 4 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and "certlab-report-text" in done.stderr
    # --json needs no reporter
    assert run_certlab("report", str(BLOCK_STORE), "--json", env=env).returncode == 0
