"""certlab regrade: consistent, stale, mismatch, and tampered or unreadable bundles, each with its exit code."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from pathlib import Path

from conftest import run_certlab
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from certlab_core._runtime.registry import Registry
from certlab_core.certify.regrade import read_bundle, regrade
from certlab_core.plugin.errors import CertlabError
from certlab_core.sdk.canonical import sealed


def copy_of(folder: Path, tmp_path: Path) -> Path:
    dest = tmp_path / folder.name
    shutil.copytree(folder, dest)
    return dest


def rewrite(folder: Path, edit, reseal: bool) -> None:  # type: ignore[no-untyped-def]
    path = folder / "bundle.json"
    bundle = json.loads(path.read_text())
    edit(bundle)
    if reseal:
        bundle = sealed(bundle)
    path.write_text(json.dumps(bundle))


def test_untouched_bundles_regrade_consistent(oracle_certification: Path, script_certification: Path) -> None:
    for folder in (oracle_certification, script_certification):
        done = run_certlab("regrade", str(folder))
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.strip().endswith("regrade: consistent")


def test_regrade_grades_each_trial_on_the_warm_servers_as_certify_does(
    registry: Registry, oracle_certification: Path
) -> None:
    # Each regraded trial started a sandbox and a test runner of its own, where certify's gradings fork from warm
    # servers: regrade took about 1.9 times the CPU of the same gradings served (cert-oracle: 3.7 against 2.0 CPU-s).
    from certlab_suite import plugin as suite

    servers_while_regrading: list[int] = []

    def progress(line: str) -> None:  # said in this process as each trial's regrade comes back
        if line.startswith("consistent "):
            servers_while_regrading.append(len(suite._servers))

    result = regrade(registry, oracle_certification, 2, progress, sandbox="bwrap")
    assert result.status == "consistent", result.lines
    assert len(servers_while_regrading) == 6 and min(servers_while_regrading) >= 1, servers_while_regrading
    assert suite._servers == []  # and none is left once it is done


def test_an_edit_without_a_new_seal_is_tampered(oracle_certification: Path, tmp_path: Path) -> None:
    folder = copy_of(oracle_certification, tmp_path)
    rewrite(folder, lambda b: b["trials"][0].update(verdict="not-fixed"), reseal=False)
    done = run_certlab("regrade", str(folder))
    assert done.returncode == 3
    assert "seal does not match" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_an_edited_change_that_contradicts_its_hash_is_tampered(script_certification: Path, tmp_path: Path) -> None:
    folder = copy_of(script_certification, tmp_path)

    def edit(bundle: dict) -> None:
        change = next(t for t in bundle["trials"] if t["changes"])["changes"][0]
        change["content_b64"] = base64.b64encode(b"def length(interval):\n    return 0\n").decode()

    rewrite(folder, edit, reseal=True)
    done = run_certlab("regrade", str(folder))
    assert done.returncode == 3, done.stdout + done.stderr
    assert "does not match its own sha256" in done.stderr


def test_an_edited_and_rehashed_change_is_a_mismatch(script_certification: Path, tmp_path: Path) -> None:
    folder = copy_of(script_certification, tmp_path)

    def edit(bundle: dict) -> None:
        trial = next(t for t in bundle["trials"] if t["verdict"] == "fixed")
        change = trial["changes"][0]
        broken = base64.b64decode(change["content_b64"]).replace(b"return end - start\n", b"return end - start + 2\n")
        change["content_b64"] = base64.b64encode(broken).decode()
        change["sha256"] = hashlib.sha256(broken).hexdigest()

    rewrite(folder, edit, reseal=True)
    done = run_certlab("regrade", str(folder))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "mismatch:" in done.stdout and "regrade: mismatch" in done.stdout


def test_a_different_installed_family_is_stale(oracle_certification: Path, tmp_path: Path) -> None:
    folder = copy_of(oracle_certification, tmp_path)
    rewrite(folder, lambda b: b["families"][0].update(version="0.9.0"), reseal=True)
    done = run_certlab("regrade", str(folder))
    assert done.returncode == 2
    assert "stale: family intervals" in done.stdout


def test_a_different_grader_chain_is_stale(oracle_certification: Path, tmp_path: Path) -> None:
    folder = copy_of(oracle_certification, tmp_path)
    rewrite(folder, lambda b: b["graders"][0].update(version="0.0.1"), reseal=True)
    done = run_certlab("regrade", str(folder))
    assert done.returncode == 2 and "stale: grader chain" in done.stdout


def test_unreadable_bundles_exit_3_in_one_line(tmp_path: Path) -> None:
    cases = {"garbage": b"{not json", "list": b"[1, 2]", "binary": b"\xff\xfe\x00", "empty": b""}
    for name, content in cases.items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / "bundle.json").write_bytes(content)
        done = run_certlab("regrade", str(folder))
        assert done.returncode == 3, (name, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    done = run_certlab("regrade", str(tmp_path / "missing"))
    assert done.returncode == 3 and "no certification bundle there" in done.stderr


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(document=st.dictionaries(st.sampled_from(["schema", "seal", "trials", "families", "x"]), json_values))
def test_any_json_is_refused_cleanly_or_read(tmp_path: Path, document: dict) -> None:
    (tmp_path / "bundle.json").write_text(json.dumps(document))
    try:
        read_bundle(tmp_path)
    except CertlabError as error:
        assert error.exit_code == 3 and "\n" not in error.message
