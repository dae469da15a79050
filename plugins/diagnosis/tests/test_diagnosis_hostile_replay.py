"""Replay of hostile evidence: a reproducer's included files are written only inside replay's own folder.

A forger edits a reproducer's included files (a path out of the folder, through a link, or not
the module's own) and reseals it: the seal is unkeyed, so it holds. ``certlab replay`` must
refuse it as tampered (exit 3, one line) and write nothing outside its folder.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from certlab_diagnosis.bundle import bundle_seal
from certlab_diagnosis.replay import load_included

from certlab_core.sdk.workcopy import Tampered


def test_replay_refuses_an_included_file_outside_its_folder_as_tampered(tmp_path: Path) -> None:
    target = tmp_path / "escaped.py"
    for path in (str(target), "../../escaped.py", "pkg/../../escaped.py"):
        document = {
            "schema": "certlab.repro/1",
            "experiment": "x",
            "run": "r",
            "manifest_seal": "0" * 64,
            "manifest": {},
            "trial": {"id": "candidate/clean/0"},
            "agent": {"reference": "escaped:agent", "rng_seed": 1, "task": {}},
            "files": [{"path": path, "module": "escaped", "text": "x = 1\n", "sha256": "0" * 64}],
        }
        document["seal"] = bundle_seal(document)
        repro = tmp_path / "repro.json"
        repro.write_text(json.dumps(document))
        done = subprocess.run(
            [sys.executable, "-m", "certlab_core.cli", "replay", str(repro)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 3, done.stdout + done.stderr
        assert "it was tampered with" in done.stderr and done.stderr.count("\n") == 1, done.stderr
        assert not target.exists()


def test_replay_writes_included_files_only_inside_its_folder(tmp_path: Path) -> None:
    folder, outside = tmp_path / "replay", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    (folder / "pkg").symlink_to(outside)
    with pytest.raises(Tampered, match="passes through pkg"):
        load_included([{"path": "pkg/agent.py", "module": "pkg.agent", "text": "x = 1\n"}], folder)
    with pytest.raises(ImportError, match="is not that of the module"):
        load_included([{"path": "../agent.py", "module": "agent", "text": "x = 1\n"}], folder)
    assert list(outside.iterdir()) == [] and not (tmp_path / "agent.py").exists()
