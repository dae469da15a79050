"""Trees an agent leaves: walked and deleted iteratively and bounded, and charged past the work copy's totals.

Measured before these bounds: a tree 3,000 levels deep in a work copy aborted the whole
certification with ``RecursionError`` (``os.walk``, ``shutil.rmtree`` and ``shutil.copytree``
recurse on Python 3.11; ``rmtree(ignore_errors=True)`` does not catch it): no bundle, and the
trees stayed in the temp folder. A bundle recording a path 2,100 levels deep did the same to
``certlab regrade``. 100,000 one-byte files made a 154 MB bundle and took 172 s for one trial.
Now the work copy's totals are counted when the agent is done, no further than their caps
(``certlab_core.sdk.trees.WORK_COPY_CAPS``: 256 MiB, 20,000 files, 64 levels); past one,
nothing of it is recorded or graded, the trial is ``agent-resource-limit``, and the
certification goes on. Every test here runs real processes and real certlab commands; no test
writes a large file (the byte cap is met by a sparse file, whose length counts).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from certlab_core._runtime.registry import Registry
from certlab_core.certify.lab import Task, TrialSpec, run_trial
from certlab_core.plugin.types.grader import Change
from certlab_core.sdk import trees
from certlab_core.sdk.canonical import sealed, structure
from certlab_core.sdk.forking import call_in_fork
from certlab_core.sdk.grading import grader_chain
from certlab_core.sdk.workcopy import Tampered, apply_changes

REPO = Path(__file__).resolve().parent.parent
PUBLISHED = REPO / "certifications" / "pattern-fixer-intervals-k3" / "bundle.json"
DEEP = 2_100  # past Python's recursion limit, and its paths past PATH_MAX


def certlab(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "certlab_core.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def deep_tree(root: Path, levels: int = DEEP, name: str = "d") -> None:
    """``levels`` nested folders below ``root`` and a file in the last, made by descriptor (no path is that long)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir(name, dir_fd=fd)
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        os.close(os.open("f", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
    finally:
        os.close(fd)


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def removed(made: trees.MadeFolder) -> bool:
    """Remove a folder that may hold deep trees, whatever a failed test left (pytest's own clean-up recurses)."""
    if trees.remove_made(made):
        return True
    subprocess.run(["rm", "-rf", "--one-file-system", made.path], check=False)
    return False


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """A folder for deep trees, removed by ``trees.remove_made`` after the test."""
    made = trees.make_temp_folder("deep-", tmp_path)
    yield made.as_path
    assert removed(made) and not made.as_path.exists()


# --------------------------------------------------------------------------- the walk and the removal


def test_the_walk_stops_at_the_depth_cap_where_os_walk_recursed(scratch: Path) -> None:
    deep_tree(scratch)
    with pytest.raises(RecursionError):  # what the harness used before
        sum(1 for _ in os.walk(scratch))
    reason = trees.over_caps(scratch)
    assert reason is not None and reason.startswith("a path 65 levels deep (the cap is 64)"), reason
    roomy = trees.TreeCaps(max_depth=DEEP + 1, max_path=2 * DEEP + 1, max_files=DEEP + 1)
    walked = list(trees.walk(scratch, roomy))  # every level, by descriptor, past PATH_MAX
    deepest = [entry for entry in walked if entry.relpath == "d/" * DEEP + "f"]
    assert len(walked) == DEEP + 1 and len(deepest) == 1 and deepest[0].depth == DEEP + 1
    assert len(str(deepest[0].path)) > 4096  # past PATH_MAX: reached by descriptor, never by this path


def test_the_walk_counts_entries_bytes_at_their_length_and_a_hard_link_once(tmp_path: Path) -> None:
    for index in range(30):
        (tmp_path / f"f{index}").write_bytes(b"x")
    assert trees.over_caps(tmp_path, trees.TreeCaps(max_files=30)) is None
    reason = trees.over_caps(tmp_path, trees.TreeCaps(max_files=29))
    assert reason is not None and reason.startswith("more than 29 files, links and folders (the cap; at f"), reason
    folder = tmp_path / "sparse"
    folder.mkdir()
    sparse = folder / "sparse.bin"
    with sparse.open("wb") as handle:
        handle.truncate(1 << 30)  # no block of the disk, and 1 GiB to whoever reads it
    os.link(sparse, folder / "again.bin")
    assert trees.over_caps(folder, trees.TreeCaps(max_bytes=1 << 30)) is None  # the link is not counted twice
    reason = trees.over_caps(folder, trees.TreeCaps(max_bytes=(1 << 30) - 1))
    assert reason is not None and reason.startswith("more than 1073741823 bytes of files"), reason
    on_disk = sum(max(p.stat().st_size, p.stat().st_blocks * 512) for p in tmp_path.glob("f*"))  # a byte takes a block
    assert trees.over_caps(tmp_path, trees.TreeCaps(max_bytes=on_disk + (1 << 30))) is None
    assert trees.over_caps(tmp_path, trees.TreeCaps(max_bytes=on_disk + (1 << 30) - 1)) is not None


def test_a_made_folder_2100_levels_deep_is_removed_with_few_descriptors(scratch: Path) -> None:
    made = trees.make_temp_folder("deep-", scratch)
    deep_tree(made.as_path)
    deep_tree(made.as_path, 200, "e")
    with pytest.raises(RecursionError):  # what the harness used before: and it left the tree behind
        shutil.rmtree(made.path, ignore_errors=True)
    before = open_descriptors()
    assert trees.remove_made(made) is True
    assert not made.as_path.exists() and list(scratch.iterdir()) == []
    assert open_descriptors() == before


def test_only_the_folder_certlab_made_is_removed(tmp_path: Path) -> None:
    made = trees.make_temp_folder("mine-", tmp_path)
    kept = tmp_path / "moved-away"
    made.as_path.rename(kept)  # the made folder lives on elsewhere, so its inode cannot be reused
    made.as_path.mkdir()
    (made.as_path / "someone-elses.txt").write_text("theirs\n")
    assert trees.remove_made(made) is False
    assert (made.as_path / "someone-elses.txt").read_text() == "theirs\n"
    shutil.rmtree(made.as_path)
    made.as_path.symlink_to(kept)  # a link to it is not it either: nothing is followed
    (kept / "inside.txt").write_text("kept\n")
    assert trees.remove_made(made) is False
    assert (kept / "inside.txt").read_text() == "kept\n" and made.as_path.is_symlink()
    made.as_path.unlink()
    assert trees.remove_made(made) is True  # gone already: nothing to do


def test_a_removal_does_not_cross_into_a_file_system_mounted_below(tmp_path: Path) -> None:
    """In a private mount namespace, a tmpfs mounted inside a made folder: its file survives the removal."""
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip("no private mount namespace here (unshare -m)")
    script = textwrap.dedent(
        """\
        import os, subprocess, sys
        from certlab_core.sdk import trees
        made = trees.make_temp_folder("mounted-", sys.argv[1])
        os.mkdir(os.path.join(made.path, "mnt"))
        open(os.path.join(made.path, "plain.txt"), "w").close()
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", os.path.join(made.path, "mnt")], check=True)
        open(os.path.join(made.path, "mnt", "other-fs.txt"), "w").close()
        print(trees.remove_made(made), sorted(os.listdir(made.path)), os.listdir(os.path.join(made.path, "mnt")))
        """
    )
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False ['mnt'] ['other-fs.txt']"


def test_a_copy_of_a_tree_too_deep_is_refused_where_copytree_recursed(scratch: Path) -> None:
    source = scratch / "src"
    source.mkdir()
    deep_tree(source, 1_200)
    with pytest.raises(RecursionError):
        shutil.copytree(source, scratch / "copy", symlinks=True)
    with pytest.raises(trees.TreeTooLarge, match="levels deep"):
        trees.copy_tree(source, scratch / "bounded")


# --------------------------------------------------------------------------- a certification with hostile trees

HOSTILE_AGENT = """\
#!/bin/sh
# One hostile tree per task, chosen by the task's id; on every other task, nothing.
case "$CERTLAB_TASK_ID" in
  */{deep}) python3 -c 'import os
for _ in range(3000):
    os.mkdir("d"); os.chdir("d")' ;;
  */{sparse}) truncate -s 300M big.bin ;;
  */{large}) truncate -s 11M large.bin ;;
esac
exit 0
"""


@pytest.fixture(scope="module")
def hostile_certification(registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """``certlab certify`` of the hostile agent on intervals, with its own TMPDIR: what it printed and left."""
    made = trees.make_temp_folder("hostile-", tmp_path_factory.mktemp("hostile"))
    root = made.as_path
    defects = [d.id for d in registry.get("task_families", "intervals").defects]
    agent = root / "hostile.sh"
    agent.write_text(HOSTILE_AGENT.format(deep=defects[0], sparse=defects[1], large=defects[2]))
    agent.chmod(0o755)
    temp = root / "tmp"
    temp.mkdir()
    out = root / "cert"
    args = ["--family", "intervals", "--agent", "command", "--agent-arg", str(agent), "--out", str(out)]
    done = certlab(
        "certify", *args, "--no-mutants", "--sandbox", "none", "--quiet", env={**os.environ, "TMPDIR": str(temp)}
    )
    yield {"done": done, "out": out, "temp": temp, "defects": defects}
    removed(made)


def test_a_certification_with_hostile_trees_completes_and_charges_each_to_the_agent(
    hostile_certification: dict[str, Any],
) -> None:
    done, out = hostile_certification["done"], hostile_certification["out"]
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert (out / "bundle.json").is_file() and (out / "CONTRACT.md").is_file()
    bundle = json.loads((out / "bundle.json").read_text())
    trials = {t["task"].split("/", 1)[1]: t for t in bundle["trials"]}
    deep, sparse, large = hostile_certification["defects"][:3]
    for defect, reason in (
        (deep, "a path 65 levels deep (the cap is 64)"),
        (sparse, "more than 268435456 bytes of files"),
    ):
        trial = trials[defect]
        assert (trial["verdict"], trial["failure_mode"]) == ("not-fixed", "agent-resource-limit"), trial
        assert trial["changes"] == [] and trial["grades"] == [], trial["id"]  # nothing of it read or graded
        assert trial["diff"].startswith("not recorded: the work copy is past its caps: " + reason), trial["diff"]
    # Within the totals, a file past the recorded-content cap is still the policy's: kept as hash and size.
    assert trials[large]["failure_mode"] == "policy-oversized-change", trials[large]
    assert len((out / "bundle.json").read_bytes()) < 1 << 20


def test_no_tree_of_the_certification_stays_in_its_temp_folder(hostile_certification: dict[str, Any]) -> None:
    assert hostile_certification["done"].returncode == 0, hostile_certification["done"].stderr
    assert sorted(p.name for p in hostile_certification["temp"].iterdir()) == []


def test_regrade_of_it_is_consistent_and_re_earns_only_what_was_graded(
    hostile_certification: dict[str, Any],
) -> None:
    out = hostile_certification["out"]
    assert (out / "bundle.json").is_file(), hostile_certification["done"].stderr
    done = certlab("regrade", str(out), "--sandbox", "none", "--workers", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    deep = hostile_certification["defects"][0]
    assert f"intervals/{deep}/1: not-fixed (agent-resource-limit) comes from the agent run, not regradable" in (
        done.stdout
    )


# --------------------------------------------------------------------------- a recorded path too deep


def deep_change(levels: int) -> dict[str, Any]:
    data = b"planted\n"
    return {
        "path": "d/" * levels + "f.py",
        "kind": "added",
        "sha256": hashlib.sha256(data).hexdigest(),
        "content_b64": base64.b64encode(data).decode(),
        "size": len(data),
        "omitted": False,
    }


def test_regrade_refuses_a_recorded_path_2100_levels_deep_in_one_line(scratch: Path) -> None:
    bundle = json.loads(PUBLISHED.read_text())
    bundle.pop("seal")
    bundle["trials"][0]["changes"].append(deep_change(2_100))
    folder = scratch / "cert"
    folder.mkdir()
    (folder / "bundle.json").write_text(json.dumps(sealed(bundle)))
    temp = scratch / "tmp"
    temp.mkdir()
    done = certlab("regrade", str(folder), "--sandbox", "none", env={**os.environ, "TMPDIR": str(temp)})
    assert done.returncode == 3, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("certlab: error:")]
    assert len(errors) == 1 and "2101 levels deep" in errors[0] and "Traceback" not in done.stderr, done.stderr
    assert list(temp.iterdir()) == []


def test_more_recorded_changes_than_a_work_copy_holds_are_tampered(tmp_path: Path) -> None:
    changes = [
        {"path": f"f{i}", "kind": "deleted", "sha256": None, "content_b64": None}
        for i in range(trees.WORK_COPY_CAPS.max_files + 1)
    ]
    with pytest.raises(Tampered, match="no work copy holds more than 20000"):
        apply_changes(tmp_path, [structure(c, Change) for c in changes])
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- caps a trial is given


def test_a_trials_caps_are_its_own_and_a_small_byte_cap_is_met_by_a_small_file(registry: Registry) -> None:
    """One real trial of the command agent with a 1 MiB cap on bytes: a 2 MiB file is past it, one of 512 KiB not."""
    family = registry.get("task_families", "intervals")
    small = trees.TreeCaps(max_bytes=1 << 20)
    graders = grader_chain(registry)
    command = registry.get("agents", "command")
    task = Task(family, family.defects[0])
    past = call_in_fork(
        run_trial,
        TrialSpec(task, command, 1, agent_args=("head -c 2097152 /dev/zero > blob.bin",), work_caps=small),
        graders,
    )
    assert (past.verdict, past.failure_mode) == ("not-fixed", "agent-resource-limit"), past
    assert "more than 1048576 bytes" in past.diff and past.changes == ()
    within = call_in_fork(
        run_trial,
        TrialSpec(task, command, 1, agent_args=("head -c 524288 /dev/zero > blob.bin",), work_caps=small),
        graders,
    )
    assert within.failure_mode != "agent-resource-limit" and [c.path for c in within.changes] == ["blob.bin"]


def test_a_trial_past_its_cap_on_files_is_not_recorded_and_one_within_it_is(registry: Registry) -> None:
    """Real trials with a cap of 100 files: 101 one-byte files are past it (the 20,000 of every run are the same
    count; 100,000 such files made a 154 MB bundle and took 172 s), 50 are recorded, each as a change."""
    family = registry.get("task_families", "intervals")
    few = trees.TreeCaps(max_files=100)
    graders = grader_chain(registry)
    command = registry.get("agents", "command")
    task = Task(family, family.defects[0])
    make = "python3 -c \"import os\nos.mkdir('junk')\nfor i in range({}): open('junk/%d' % i, 'w').write('x')\""
    past = call_in_fork(run_trial, TrialSpec(task, command, 1, agent_args=(make.format(101),), work_caps=few), graders)
    assert (past.verdict, past.failure_mode) == ("not-fixed", "agent-resource-limit"), past
    assert past.diff.startswith("not recorded: the work copy is past its caps: more than 100 files"), past.diff
    assert past.changes == ()
    within = call_in_fork(run_trial, TrialSpec(task, command, 1, agent_args=(make.format(50),), work_caps=few), graders)
    assert within.failure_mode == "policy-outside-allowed-paths" and len(within.changes) == 50, within.failure_mode
