"""certlab rederive regenerates decision.json byte for byte; the archived BLOCK, INCONCLUSIVE and ERROR stores hold."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from report_helpers import ARCHIVED, STORES, run_certlab


@pytest.mark.parametrize("name", sorted(STORES))
def test_archived_store_rederives_byte_for_byte(name: str) -> None:
    done = run_certlab("rederive", str(ARCHIVED / name))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"re-derived byte for byte ({STORES[name]})" in done.stdout
    assert json.loads((ARCHIVED / name / "decision.json").read_text())["verdict"] == STORES[name]


@pytest.mark.parametrize("name", sorted(STORES))
def test_gate_agrees_with_the_archived_verdict(name: str) -> None:
    done = run_certlab("gate", str(ARCHIVED / name))
    assert done.returncode == {"BLOCK": 1, "INCONCLUSIVE": 2, "ERROR": 3}[STORES[name]], done.stdout + done.stderr


def _copy(name: str, tmp_path: Path) -> Path:
    target = tmp_path / name
    shutil.copytree(ARCHIVED / name, target)
    return target


def test_an_edited_decision_is_found_and_rewritten_only_on_request(tmp_path: Path) -> None:
    store = _copy("block", tmp_path)
    original = (store / "decision.json").read_bytes()
    (store / "decision.json").write_bytes(original.replace(b'"verdict": "BLOCK"', b'"verdict": "PASS"', 1))
    done = run_certlab("rederive", str(store))
    assert done.returncode == 1
    assert "differs" in done.stdout and '"verdict": "PASS"' in done.stdout and '"verdict": "BLOCK"' in done.stdout
    assert (store / "decision.json").read_bytes() != original
    rewritten = run_certlab("rederive", str(store), "--write")
    assert rewritten.returncode == 0, rewritten.stdout + rewritten.stderr
    assert (store / "decision.json").read_bytes() == original


def test_a_missing_decision_is_written(tmp_path: Path) -> None:
    store = _copy("inconclusive", tmp_path)
    original = (store / "decision.json").read_bytes()
    (store / "decision.json").unlink()
    done = run_certlab("rederive", str(store))
    assert done.returncode == 0 and "wrote" in done.stdout
    assert (store / "decision.json").read_bytes() == original


def test_an_edited_trial_makes_the_rederived_decision_an_error(tmp_path: Path) -> None:
    store = _copy("block", tmp_path)
    lines = (store / "trials.jsonl").read_text().splitlines(keepends=True)
    flipped = {'"outcome":"success"': '"outcome":"failure"', '"outcome":"failure"': '"outcome":"success"'}
    before, after = next((b, a) for b, a in flipped.items() if b in lines[0])
    lines[0] = lines[0].replace(before, after, 1)
    (store / "trials.jsonl").write_text("".join(lines))
    done = run_certlab("rederive", str(store))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "(ERROR)" in done.stdout


def test_not_a_store_is_one_clear_line(tmp_path: Path) -> None:
    done = run_certlab("rederive", str(tmp_path / "nowhere"))
    assert done.returncode == 4
    assert done.stderr.count("\n") == 1 and "certlab: error:" in done.stderr
