"""The executor ``local`` is this distribution's record; ExecutorConformance passes it; without it, one line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from certlab_core._runtime.registry import discover
from certlab_core.plugin import Executor, ExecutorOptions, UsageError
from certlab_core.testing import ExecutorConformance, run_certlab

REPO = Path(__file__).resolve().parents[3]
LEFT_OUT = "installed but left out"


class TestLocalConformance(ExecutorConformance):
    """Fresh processes, every unit back once, failures as failures, at most ``--workers`` at once."""

    executor_name = "local"


def test_the_local_record_is_discovered_and_forks_here() -> None:
    registry = discover()
    record = registry.get(Executor, "local")
    assert registry.plugin_of(Executor, "local").distribution == "certlab-executor-local"
    assert record.forks_here is True


def test_forks_here_must_be_a_bool_not_a_truthy_word() -> None:
    # A remote executor whose record said forks_here="no" would have certify fork its work here, unseen.
    start = discover().get(Executor, "local").start
    with pytest.raises(TypeError):
        Executor(name="x", description="x", start=start, forks_here="no")  # type: ignore[arg-type]


def test_a_scheduler_is_refused_in_one_line() -> None:
    with pytest.raises(UsageError) as refused:
        discover().get(Executor, "local").start(ExecutorOptions(workers=1, scheduler="tcp://127.0.0.1:1"))
    assert refused.value.message == (
        "--scheduler tcp://127.0.0.1:1: the local executor has no scheduler; add --executor dask"
    )


def test_a_stage_prepared_again_keeps_its_serving_process() -> None:
    from certlab_core.plugin import Stage, Work

    session = discover().get(Executor, "local").start(ExecutorOptions(workers=1))
    try:
        stage = Stage(name="pid", call=_pid_of_parent, preload=_nothing)
        session.prepare([stage])
        session.submit(Work(tag=1, stage=stage, arg=None))
        (first,) = session.wait()
        session.prepare([stage])
        session.submit(Work(tag=2, stage=stage, arg=None))
        (second,) = session.wait()
    finally:
        session.close()
    assert first.failure is None and second.failure is None, (first, second)
    assert first.value == second.value != os.getpid()  # one zygote served both units


STAGE_CODE = """
import os

def nothing():
    return None

def zygotes_parent(_preloaded, _arg):
    # the zygote that forked this unit, and the process that started that zygote
    zygote = os.getppid()
    with open(f"/proc/{zygote}/stat", encoding="ascii") as stat:
        return zygote, int(stat.read().rsplit(")", 1)[1].split()[1])
"""


def test_stages_prepared_together_share_one_interpreter_start_and_end_with_the_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A tool-world run prepares three stages (each arm's, the oracles'): one fresh interpreter (a zygote host)
    # forks their zygotes, where each was an interpreter started for it alone.
    from certlab_core.plugin import Stage, Work

    (tmp_path / "stage_code.py").write_text(STAGE_CODE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the stages' code, importable where they are served
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    import stage_code  # type: ignore[import-not-found]

    session = discover().get(Executor, "local").start(ExecutorOptions(workers=3))
    try:
        stages = [Stage(name=n, call=stage_code.zygotes_parent, preload=stage_code.nothing) for n in ("a", "b", "c")]
        session.prepare(stages)
        for stage in stages:
            session.submit(Work(tag=stage.name, stage=stage, arg=None))
        done = {}
        while session.busy():
            done.update((unit.tag, unit) for unit in session.wait())
    finally:
        session.close()
    assert all(unit.failure is None for unit in done.values()), done
    zygotes, parents = zip(*(done[stage.name].value for stage in stages), strict=True)
    assert len(set(zygotes)) == 3  # a zygote per stage
    (host,) = set(parents)  # all forked by one process
    assert host != os.getpid()
    assert list(temp.iterdir()) == []  # what the zygotes made is gone once the session has closed


def _nothing() -> None:
    return None


def _pid_of_parent(_preloaded: object, _arg: object) -> int:
    return os.getppid()


WITHOUT_LOCAL = "intervals,calibration,policy,suite,sandbox-none,retry-world,clopper-pearson,faults"
REFUSAL = (
    "certlab: error: unknown executor 'local' (valid: {valid}); it is provided by the plugin executor-local "
    "(certlab-executor-local), which CERTLAB_PLUGINS leaves out: add executor-local to CERTLAB_PLUGINS"
)


def test_left_out_certify_is_refused_in_one_line_before_the_first_trial(tmp_path: Path) -> None:
    env = {**os.environ, "CERTLAB_PLUGINS": WITHOUT_LOCAL}
    out = tmp_path / "certification"
    done = run_certlab("certify", "-f", "intervals", "-a", "null", "--sandbox", "none", "-o", str(out), env=env)
    assert done.stderr.splitlines() == [REFUSAL.format(valid="none installed")], done.stderr
    assert done.returncode == 4 and not out.exists()


def test_left_out_run_is_refused_in_one_line_before_the_first_trial(tmp_path: Path) -> None:
    env = {**os.environ, "CERTLAB_PLUGINS": WITHOUT_LOCAL}
    out = tmp_path / "runs"
    descriptor = REPO / "examples" / "retry" / "a_vs_b.yaml"
    done = run_certlab("run", str(descriptor), "--out", str(out), "--quiet", env=env)
    assert done.stderr.splitlines() == [REFUSAL.format(valid="none installed")], done.stderr
    assert done.returncode == 4 and not out.exists()
