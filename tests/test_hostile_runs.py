"""Hostile things beside and inside a run: damaged earlier runs, a second certify into one folder, a 2 GB file.

- An earlier run in the ``--out`` folder is read only to be listed: a damaged one (a FIFO for
  its decision, a manifest nested 100,000 deep) is skipped with a note and never changes
  the verdict or the exit code of ``run``, ``gate`` or ``report``.
- ``certify`` holds an exclusive ``flock`` on its output folder: a second certify there
  refuses in one line, a killed one leaves no lock behind, and a finished folder is never
  overwritten.
- An agent that writes a 2 GB file: the work copy is past its cap on bytes (256 MiB), so
  nothing of it is read, recorded or graded, the trial is the agent's failure
  (``agent-resource-limit``), and the whole certification stays under 300 MB of memory.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from certlab_core.certify.out_folder import output_lock
from certlab_core.plugin.errors import UsageError
from certlab_core.sdk.workcopy import DEFAULT_FILE_CAP, record_changes, tree_hashes

REPO = Path(__file__).resolve().parent.parent
ARCHIVED = REPO / "tests" / "archived_stores" / "block"
DEEP = "[" * 100_000 + "]" * 100_000
SMALL_EXPERIMENT = """\
schema: certlab.experiment/1
experiment: hostile-neighbours
task:
  world: retry-inventory
  input: {orders: 2, existing_share: 0.0, flaky_confirm_rate: 0.0, skus: [widget, gadget]}
oracle: world
arms:
  baseline: {agent: "certlab_retry_world.agents:agent_a", label: A}
  candidate: {agent: "certlab_retry_world.agents:agent_b", label: B}
conditions:
  - name: reserve-timeout
    bucket: falsify
    faults: [{fault: tool_timeout, tool: reserve, on_calls: [1], params: {executed: false}}]
  - name: clean
    bucket: benign
rule: {name: clopper-pearson, alpha: 0.05, delta: 0.10, looks: 1}
n_per_arm: 10
seed: 5
budgets: {tool_calls: 40, seconds: 10}
"""


def certlab(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "certlab_core.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        check=False,
    )


def damaged_neighbours(runs: Path, experiment: str) -> None:
    """Two earlier runs beside the real one: one whose decision is a FIFO, one whose manifest nests 100,000 deep."""
    fifo = runs / "earlier-with-a-fifo"
    fifo.mkdir(parents=True)
    (fifo / "manifest.json").write_text(json.dumps({"experiment": experiment}))
    os.mkfifo(fifo / "decision.json")
    deep = runs / "earlier-too-deep"
    deep.mkdir()
    (deep / "manifest.json").write_text(DEEP)


def assert_clean(done: subprocess.CompletedProcess[str]) -> None:
    everything = done.stdout + done.stderr
    assert "internal error" not in everything and "Traceback" not in everything, everything


def test_damaged_earlier_runs_change_neither_gate_nor_report(tmp_path: Path) -> None:
    store = tmp_path / "runs" / "the-run"
    shutil.copytree(ARCHIVED, store)
    experiment = json.loads((store / "manifest.json").read_text())["experiment"]
    damaged_neighbours(tmp_path / "runs", experiment)
    gate = certlab("gate", str(store), timeout=120)  # the FIFO would block a plain read forever
    assert_clean(gate)
    assert gate.returncode == 1 and "verdict: BLOCK" in gate.stdout, gate.stdout + gate.stderr  # as without them
    assert "earlier-with-a-fifo: skipped (" in gate.stdout and "FIFO" in gate.stdout, gate.stdout
    assert "earlier run earlier-too-deep skipped:" in gate.stdout and "nested" in gate.stdout, gate.stdout
    report = certlab("report", str(store), timeout=120)
    assert_clean(report)
    assert report.returncode == 0, report.stdout + report.stderr
    assert "earlier-with-a-fifo (skipped: its decision.json is damaged)" in report.stdout, report.stdout


def test_damaged_earlier_runs_in_the_out_folder_do_not_change_a_run(tmp_path: Path) -> None:
    (tmp_path / "certlab.yaml").write_text(SMALL_EXPERIMENT)
    damaged_neighbours(tmp_path / "runs", "hostile-neighbours")
    done = certlab("run", "certlab.yaml", "--out", "runs", "--quiet", cwd=tmp_path, timeout=300)
    assert_clean(done)
    assert done.returncode == 1, done.stdout + done.stderr  # B copes worse with the timed-out reserve: BLOCK
    assert "verdict: BLOCK" in done.stdout
    assert "earlier-with-a-fifo: skipped (" in done.stdout and "earlier-too-deep skipped" in done.stdout


# --------------------------------------------------------------------------- one certify per folder


def test_a_second_certify_into_a_locked_folder_refuses_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "cert"
    with output_lock(out):  # as a certify in progress holds it
        done = certlab("certify", "--family", "intervals", "--agent", "oracle", "--out", str(out), timeout=120)
    assert done.returncode == 4, done.stdout + done.stderr
    assert "another certlab certify is writing there" in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert list(out.iterdir()) == []


def test_a_killed_certify_leaves_no_lock_behind(tmp_path: Path) -> None:
    out = tmp_path / "cert"
    pid = os.fork()
    if pid == 0:  # a run that takes the lock and dies without letting go of it
        try:
            with output_lock(out):
                os.kill(os.getpid(), 9)
        finally:
            os._exit(1)
    _pid, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status)
    with output_lock(out):
        pass


def test_a_refused_certify_leaves_no_empty_folder_of_its_own_behind(tmp_path: Path) -> None:
    # Before, a certify refused at once (an unknown family, a missing --task) left its --out folder, empty.
    for refused in (("--family", "nosuch"), ("--family", "intervals", "--task", str(tmp_path / "nowhere"))):
        out = tmp_path / "new" / "cert"
        done = certlab("certify", *refused, "--agent", "null", "--out", str(out), timeout=120)
        assert done.returncode == 4 and done.stderr.count("\n") == 1, done.stderr
        assert not (tmp_path / "new").exists(), list((tmp_path / "new").rglob("*"))
    given = tmp_path / "given"  # a folder the user made is theirs: it stays, empty as it was
    given.mkdir()
    done = certlab("certify", "--family", "nosuch", "--agent", "null", "--out", str(given), timeout=120)
    assert done.returncode == 4 and given.is_dir() and list(given.iterdir()) == []
    journal = tmp_path / "journal"  # what a run wrote there (a journal to resume) keeps the folder
    with pytest.raises(UsageError), output_lock(journal):
        (journal / "trials.jsonl").write_text("{}\n")
        raise UsageError("refused after writing")
    assert (journal / "trials.jsonl").read_text() == "{}\n"


def test_a_certify_into_a_folder_holding_other_files_refuses_and_writes_nothing_there(tmp_path: Path) -> None:
    # Before: --out / wrote /bundle.json and /CONTRACT.md beside the system's folders, and --out '' wrote them
    # into the working folder: any folder without a certification was taken.
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine\n")
    for out, cwd in ((str(theirs), tmp_path), ("", theirs)):
        done = certlab("certify", "-f", "intervals", "-a", "oracle", "--no-mutants", "-q", "--out", out, cwd=cwd)
        assert done.returncode == 4, done.stdout + done.stderr
        assert done.stderr.count("\n") == 1, done.stderr
        assert "holds other files (notes.txt); give a new or empty folder" in done.stderr
        assert sorted(p.name for p in theirs.iterdir()) == ["notes.txt"]


def test_a_finished_certification_is_never_overwritten(tmp_path: Path) -> None:
    out = tmp_path / "cert"
    out.mkdir()
    (out / "bundle.json").write_text("{}")
    with pytest.raises(UsageError, match="already holds a certification"), output_lock(out):
        raise AssertionError("the lock was given on a finished folder")
    done = certlab("certify", "--family", "intervals", "--agent", "oracle", "--out", str(out), timeout=120)
    assert done.returncode == 4 and "already holds a certification" in done.stderr, done.stderr
    assert (out / "bundle.json").read_text() == "{}"


# --------------------------------------------------------------------------- an agent that writes 2 GB


def test_a_change_past_the_caps_is_kept_as_hash_and_size_only(tmp_path: Path) -> None:
    root = tmp_path / "work"
    root.mkdir()
    (root / "a.py").write_text("a\n")
    issued = tree_hashes(root)
    with (root / "big.bin").open("wb") as handle:
        handle.truncate(DEFAULT_FILE_CAP + 1)
    (root / "b.py").write_bytes(b"b" * 600)
    (root / "c.py").write_bytes(b"c" * 900)
    changes = {c.path: c for c in record_changes(root, issued, total_cap=1000)}
    assert changes["big.bin"].omitted and changes["big.bin"].content_b64 is None
    assert changes["big.bin"].size == DEFAULT_FILE_CAP + 1 and changes["big.bin"].sha256
    assert not changes["b.py"].omitted and changes["c.py"].omitted  # c.py would pass the trial's total cap


BIG_AGENT = """\
#!/bin/sh
# Leave a 2 GB file (sparse: the disk is spared, every reader still sees 2 GB).
truncate -s 2G big.bin
"""

# One real trial of the command agent, as certify runs it (issue, run, count the work copy's totals), without the
# sandbox (whose file-size limit would stop the write first). What it holds is measured two ways: the peak of
# the Python heap (tracemalloc: every object certlab makes, in this process and in each forked grader, where it is
# inherited), which the 300 MB bound is held against, and the largest process's peak resident set, which is reported.
# The address space is capped at 1.5 GB, so a reader that held the file would fail outright, whichever figure missed it.
ONE_TRIAL = textwrap.dedent(
    """\
    import json, os, resource, sys, tracemalloc
    limit = 1536 << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    from certlab_core.sdk.canonical import unstructure
    from certlab_core.certify.lab import Task, TrialSpec, run_trial
    from certlab_core.sdk.grading import grader_chain
    from certlab_core._runtime.registry import discover
    registry = discover()
    family = registry.get("task_families", "intervals")
    spec = TrialSpec(Task(family, family.defects[0]), registry.get("agents", "command"), 1, agent_args=(sys.argv[1],))
    tracemalloc.start()
    record = run_trial(spec, grader_chain(registry))
    heap = tracemalloc.get_traced_memory()[1] >> 10
    rss = {"self": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}
    rss["children"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(("VmHWM:", "RssAnon:", "RssFile:")):
                rss[line.split(":")[0]] = int(line.split()[1])
    print(json.dumps({"record": unstructure(record), "heap_kb": heap, "rss_kb": rss}))
    """
)


def test_an_agent_writing_2_gb_is_past_the_work_copys_caps_in_under_300_mb(tmp_path: Path) -> None:
    agent = tmp_path / "big.sh"
    agent.write_text(BIG_AGENT)
    agent.chmod(0o755)
    done = subprocess.run(
        [sys.executable, "-c", ONE_TRIAL, str(agent)], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    record, heap_kb = result["record"], result["heap_kb"]
    assert heap_kb < 300 * 1024, f"heap peak {heap_kb / 1024:.0f} MB (resident, kB: {result['rss_kb']})"
    assert record["failure_mode"] == "agent-resource-limit" and record["verdict"] == "not-fixed", record
    assert record["changes"] == [] and record["grades"] == []  # never read: counted by its size, and no further
    assert "past its caps: more than 268435456 bytes" in record["diff"] and "big.bin" in record["diff"]
    assert len(json.dumps(record)) < 1 << 20  # what the bundle holds of it
