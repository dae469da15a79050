"""The executor ``dask`` on a real cluster (``dask scheduler`` + ``dask worker``, as a user starts one): the same
records and decision as ``local``, a lost worker's trial run again, and refusals before the first trial.

Every run goes through the ``certlab`` command in a subprocess: a Dask client starts threads,
and the test process must stay fit to fork. One cluster serves the module.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from certlab_executor_dask.plugin import CONNECT_TIMEOUT_S, mismatched

from certlab_core.gate.classify import WORKER_LOST
from certlab_core.gate.runner import VOLATILE_FIELDS
from certlab_core.plugin.types.executor import ExecutorOptions
from certlab_core.testing import ExecutorConformance

BIN = Path(sys.executable).parent
AGENTS = "certlab_retry_world.agents"


def descriptor(folder: Path, n_per_arm: int = 6, **changes: Any) -> Path:
    data: dict[str, Any] = {
        "schema": "certlab.experiment/1",
        "experiment": "dask-exp",
        "task": {"world": "retry-inventory", "input": {"orders": 2}},
        "oracle": "world",
        "arms": {
            "baseline": {"agent": f"{AGENTS}:agent_a", "label": "A"},
            "candidate": {"agent": f"{AGENTS}:agent_b", "label": "B"},
        },
        "conditions": [
            {
                "name": "reserve-timeout",
                "bucket": "falsify",
                "faults": [{"fault": "tool_timeout", "tool": "reserve", "on_calls": [1]}],
            },
            {"name": "calm", "bucket": "benign", "faults": []},
        ],
        "rule": {"name": "clopper-pearson", "alpha": 0.05, "delta": 0.1, "looks": 1},
        "n_per_arm": n_per_arm,
        "seed": 11,
        "budgets": {"tool_calls": 60, "model_steps": 10, "seconds": 20},
    }
    data.update(changes)
    path = folder / "certlab.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def certlab(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "certlab_core.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


def fake_distribution(folder: Path, name: str, version: str, fault: str) -> None:
    """A plugin distribution (dist-info and module) visible only to processes given ``folder`` on PYTHONPATH."""
    module = name.replace("-", "_")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{module}.py").write_text(
        textwrap.dedent(
            f"""
            from certlab_core.plugin import Fault, hookimpl

            def inject(context):
                return None

            @hookimpl
            def certlab_faults():
                return [Fault(name={fault!r}, description="never fires", inject=inject, target="tool")]
            """
        ),
        encoding="utf-8",
    )
    info = folder / f"{module}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[certlab.plugins]\n{module} = {module}\n", encoding="utf-8")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def dask_cluster(root: Path, workers: int, **worker_env: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A scheduler and ``workers`` single-thread worker processes, as a user starts them; its address and scheduler.

    The cluster's temp folder is ``root/cluster-tmp``: what the workers' zygotes and trials leave there is seen
    (none must be left once the workers have stopped), and dask's own dask-scratch-space stays out of the test
    run's temp folder."""
    address = f"tcp://127.0.0.1:{free_port()}"
    cluster_temp = root / "cluster-tmp"
    cluster_temp.mkdir()
    scheduler = subprocess.Popen(
        [str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", address.rsplit(":", 1)[1], "--no-dashboard"],
        env={**os.environ, "TMPDIR": str(cluster_temp)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    processes = subprocess.Popen(
        [str(BIN / "dask"), "worker", address, "--nworkers", str(workers), "--nthreads", "1", "--no-dashboard"],
        env={**os.environ, **worker_env, "TMPDIR": str(cluster_temp)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait = f"import distributed; distributed.Client({address!r}, timeout=60).wait_for_workers({workers})"
        ready = subprocess.run([sys.executable, "-c", wait], timeout=120, check=False)
        assert ready.returncode == 0, "the test cluster did not start"
        yield address, scheduler
    finally:
        for process in (processes, scheduler):  # each started its own session: its group is its processes
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    # The SIGTERM reached each worker's zygotes too, which died of it alone and left their calls' temp folders
    # (28 in one run of this module). A zygote leaves the stop to its worker and ends, tidily, when it goes.
    deadline = time.monotonic() + 30
    while (left := sorted(p.name for p in cluster_temp.iterdir() if p.name.startswith("certlab-"))) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.1)
    assert left == [], "the workers' zygotes left their temp folders"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A scheduler and two single-thread worker processes; the workers see certlab-f14probe 0.0.2."""
    root = tmp_path_factory.mktemp("cluster")
    fake_distribution(root / "worker-path", "certlab-f14probe", "0.0.2", "f14_never")
    with dask_cluster(root, 2, PYTHONPATH=str(root / "worker-path")) as (address, _scheduler):
        yield {"address": address, "root": root}


def run_store(out: Path) -> Path:
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    return folder


def lines(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in (folder / "trials.jsonl").read_text(encoding="utf-8").splitlines() if raw]


def recorded_lines(out: Path) -> int:
    """The complete lines in the one run store under ``out`` so far (0 before it exists)."""
    found = list(out.glob("*/trials.jsonl")) if out.is_dir() else []
    return found[0].read_bytes().count(b"\n") if found else 0


def stable(line: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in line.items() if key not in VOLATILE_FIELDS}


UNHURRIED = """
import time
from certlab_retry_world.agents import agent_a, agent_b


def steady(task, tools, rng):
    time.sleep(0.4)  # long enough that a kill lands mid-run
    return agent_a(task, tools, rng)


def sloppy(task, tools, rng):
    time.sleep(0.4)
    return agent_b(task, tools, rng)
"""


UNHURRIED_ARMS = {
    "baseline": {"agent": "unhurried:steady", "label": "A"},
    "candidate": {"agent": "unhurried:sloppy", "label": "B"},
}


@pytest.fixture(scope="module")
def whole_local_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """12 trials (B fails some under the reserve timeout) run uninterrupted on local: the reference for dask."""
    folder = tmp_path_factory.mktemp("whole")
    (folder / "unhurried.py").write_text(UNHURRIED, encoding="utf-8")
    path = descriptor(folder, n_per_arm=3, arms=UNHURRIED_ARMS)
    done = certlab("run", str(path), "--out", str(folder / "local"), "--quiet", "--workers", "2")
    assert done.returncode in (0, 1, 2), done.stderr
    return {"descriptor": path, "store": run_store(folder / "local"), "exit": done.returncode}


def test_the_same_manifest_gives_the_same_records_and_decision_on_local_and_dask(
    cluster: dict[str, Any], whole_local_run: dict[str, Any], tmp_path: Path
) -> None:
    dask = certlab(
        "run", str(whole_local_run["descriptor"]), "--out", str(tmp_path / "dask"), "--quiet", "--executor", "dask",
        "--scheduler", cluster["address"],
    )  # fmt: skip
    assert dask.returncode == whole_local_run["exit"], dask.stderr
    local_store, dask_store = whole_local_run["store"], run_store(tmp_path / "dask")
    by_id = {(line["id"], line["attempt"]): line for line in lines(local_store)}
    on_dask = {(line["id"], line["attempt"]): line for line in lines(dask_store)}
    assert len(by_id) == 12 and set(by_id) == set(on_dask)
    for key, line in by_id.items():
        assert stable(on_dask[key]) == stable(line), key
    assert (dask_store / "decision.json").read_bytes() == (local_store / "decision.json").read_bytes()
    gate = certlab("gate", str(dask_store))  # the store stands on its own: recomputed, the same verdict
    assert gate.returncode == whole_local_run["exit"], gate.stdout


KILLER = '''
import os, signal
from pathlib import Path
from certlab_retry_world.agents import agent_a

MARK = Path(__file__).with_name("killed")


def parent(pid):
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def killer(task, tools, rng):
    """On its first run, kill the Dask worker process this trial runs under (trial -> zygote -> host -> worker)."""
    if not MARK.exists():
        MARK.write_text("")
        host = parent(os.getppid())
        assert b"zygote_host" in Path(f"/proc/{host}/cmdline").read_bytes()
        os.kill(parent(host), signal.SIGKILL)
    return agent_a(task, tools, rng)
'''


def test_a_worker_lost_mid_trial_runs_that_trial_again_as_a_new_attempt(
    cluster: dict[str, Any], tmp_path: Path
) -> None:
    (tmp_path / "killing.py").write_text(KILLER, encoding="utf-8")
    path = descriptor(
        tmp_path,
        n_per_arm=4,
        arms={
            "baseline": {"agent": "killing:killer", "label": "A"},
            "candidate": {"agent": f"{AGENTS}:agent_a", "label": "A"},
        },
        conditions=[{"name": "calm", "bucket": "benign", "faults": []}],
    )
    done = certlab(
        "run",
        str(path),
        "--out",
        str(tmp_path / "out"),
        "--quiet",
        "--executor",
        "dask",
        "--scheduler",
        cluster["address"],
    )  # fmt: skip  (no --retry-infra: a lost worker's trial runs again all the same)
    assert done.returncode in (0, 2), done.stdout + done.stderr
    assert (tmp_path / "killed").exists()
    store = run_store(tmp_path / "out")
    recorded = lines(store)
    lost = [line for line in recorded if str(line["error"]).startswith(f"{WORKER_LOST}:")]
    assert lost, "no attempt was recorded as lost with its worker"
    for line in lost:
        assert line["outcome"] == "error" and line["failure_mode"] is None and line["oracle"] is None
    last: dict[str, dict[str, Any]] = {}
    for line in recorded:
        if line["attempt"] > last.get(line["id"], {"attempt": 0})["attempt"]:
            last[line["id"]] = line
    assert len(last) == 8  # every scheduled trial, once
    assert all(line["outcome"] != "error" for line in last.values())
    for line in lost:
        assert any(other["id"] == line["id"] and other["attempt"] == line["attempt"] + 1 for other in recorded)
    decision = json.loads((store / "decision.json").read_text(encoding="utf-8"))
    assert decision["verdict"] != "ERROR", decision["problems"]
    assert decision["trials"]["attempts"] == len(recorded) and len(recorded) == 8 + len(lost)
    gate = certlab("gate", str(store))  # the attempts ledger takes a lost worker's re-run as no retry
    assert gate.returncode == done.returncode, gate.stdout


def test_kill_9_mid_run_on_dask_then_resume_on_dask_gives_the_uninterrupted_decision(
    cluster: dict[str, Any], whole_local_run: dict[str, Any], tmp_path: Path
) -> None:
    """Each trial once in the store, the first records untouched, and decision.json byte for byte as a whole run's."""
    dask = ("--executor", "dask", "--scheduler", cluster["address"])
    path, out = str(whole_local_run["descriptor"]), str(tmp_path / "cut")
    runner = subprocess.Popen(
        [sys.executable, "-m", "certlab_core.cli", "run", path, "--out", out, "-q", *dask],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while recorded_lines(tmp_path / "cut") < 3:
        assert runner.poll() is None and time.monotonic() < deadline, "the run ended before it could be killed"
        time.sleep(0.05)
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait(timeout=30)
    store = run_store(tmp_path / "cut")
    before = (store / "trials.jsonl").read_bytes()
    recorded = before.count(b"\n")
    assert 3 <= recorded < 12 and not (store / "decision.json").exists()
    resumed = certlab("run", "--resume", str(store), "--quiet", *dask)
    assert resumed.returncode == whole_local_run["exit"], resumed.stdout + resumed.stderr
    assert f"resuming {store}: {recorded} of 12 trials recorded" in resumed.stderr
    after = (store / "trials.jsonl").read_bytes()
    assert after.startswith(before[: before.rfind(b"\n") + 1])  # resuming only appends
    ids = [(line["id"], line["attempt"]) for line in lines(store)]
    assert len(ids) == len(set(ids)) == 12 and {attempt for _id, attempt in ids} == {1}
    assert (store / "decision.json").read_bytes() == (whole_local_run["store"] / "decision.json").read_bytes()
    gate = certlab("gate", str(store))  # its attempts ledger: each record written once
    assert gate.returncode == whole_local_run["exit"] and "problem:" not in gate.stdout, gate.stdout


SLEEPER = """
import os, time
from pathlib import Path


def sleeper(task, tools, rng):
    \"\"\"Say where this trial runs, then outlive any wait: only a stop from outside ends it.\"\"\"
    (Path(__file__).with_name("trials") / str(os.getpid())).write_text("")
    time.sleep(600)
"""


def sleepers(folder: Path) -> tuple[Path, Path]:
    """A descriptor of 8 trials whose agents sleep 10 minutes in ``folder``, and where each trial writes its pid."""
    (folder / "sleeping.py").write_text(SLEEPER, encoding="utf-8")
    trials = folder / "trials"
    trials.mkdir()
    path = descriptor(
        folder,
        n_per_arm=4,
        arms={side: {"agent": "sleeping:sleeper", "label": "A"} for side in ("baseline", "candidate")},
        conditions=[{"name": "calm", "bucket": "benign", "faults": []}],
        budgets={"tool_calls": 60, "model_steps": 10, "seconds": 900},
    )
    return path, trials


def test_a_killed_run_leaves_no_trial_running_on_the_cluster(cluster: dict[str, Any], tmp_path: Path) -> None:
    """Dask cannot stop a running task: a trial whose run had gone ran on to its own time limit (10 min here).

    kill -9: nothing of the run's own closing runs, the scheduler sees its client gone (a SIGTERM, where
    the run closes its client, lets the tasks go the same way)."""
    path, trials = sleepers(tmp_path)
    dask = ("--executor", "dask", "--scheduler", cluster["address"])
    runner = subprocess.Popen(
        [sys.executable, "-m", "certlab_core.cli", "run", str(path), "--out", str(tmp_path / "out"), "-q", *dask],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while len(list(trials.iterdir())) < 2:  # one trial on each worker's one thread
        assert runner.poll() is None and time.monotonic() < deadline, "the trials did not start"
        time.sleep(0.05)
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait(timeout=60)
    started = [int(p.name) for p in trials.iterdir()]
    deadline = time.monotonic() + 20
    while (alive := [pid for pid in started if running(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive == [], "a trial of the stopped run still runs on the cluster"
    time.sleep(1)  # and no trial of the stopped run starts after it (its queued tasks are let go too)
    assert sorted(int(p.name) for p in trials.iterdir()) == sorted(started)


SLOW_UNITS = """
import os, time
from pathlib import Path


def nothing():
    return None


def sleep(_preloaded, arg):
    folder, index = arg
    (Path(folder) / f"{index}-{os.getpid()}").write_text("")
    time.sleep(600)
"""

CANCELLING_CLIENT = """
import pickle, sys, time
from pathlib import Path
from distributed import Client
from certlab_core.plugin import Stage
from certlab_executor_dask.plugin import run_units
import slow_units

address, folder = sys.argv[1:]
stage = Stage(name="slow", call=slow_units.sleep, preload=slow_units.nothing)
with Client(address, timeout=60) as client:
    # The scheduler unpickles each task it is sent, and it cannot import slow_units: a worker unpickles them.
    units = client.submit(pickle.loads, pickle.dumps([(stage, (folder, index), None) for index in range(3)]))
    task = client.submit(run_units, units, pure=False)
    deadline = time.monotonic() + 120
    while not any(Path(folder).iterdir()):
        assert not task.done(), f"the task ended before it was let go: {task.result()}"
        assert time.monotonic() < deadline, "the task's first unit did not start"
        time.sleep(0.05)
    client.cancel([task, units])
"""


def test_a_task_let_go_mid_unit_kills_that_unit_and_starts_none_of_the_units_after_it(
    cluster: dict[str, Any], tmp_path: Path
) -> None:
    """One task of three units, each of which would sleep 10 minutes; its client cancels it during the first."""
    (cluster["root"] / "worker-path" / "slow_units.py").write_text(SLOW_UNITS, encoding="utf-8")
    started = tmp_path / "started"
    started.mkdir()
    client = [sys.executable, "-c", CANCELLING_CLIENT, cluster["address"], str(started)]
    env = {**os.environ, "PYTHONPATH": str(cluster["root"] / "worker-path")}
    done = subprocess.run(client, capture_output=True, text=True, timeout=180, env=env, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    ((first, pid),) = [p.name.split("-") for p in started.iterdir()]  # the units run one after the other
    assert first == "0"
    deadline = time.monotonic() + 20
    while running(int(pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not running(int(pid)), "the unit of the task let go still runs"
    time.sleep(2)  # the worker's next unit would have started by now
    assert sorted(p.name.split("-")[0] for p in started.iterdir()) == ["0"], "a unit after the one killed started"


def test_a_scheduler_that_dies_mid_run_is_one_line_that_says_how_to_resume(tmp_path: Path) -> None:
    """Before: Dask's own ERROR line ("Failed to reconnect to scheduler"), then certlab's naming the OSError, and
    nothing said of the records kept. A cluster of its own: this one's scheduler is killed."""
    path, trials = sleepers(tmp_path)
    out = tmp_path / "out"
    with dask_cluster(tmp_path, 1) as (address, scheduler):
        args = ("run", str(path), "--out", str(out), "-q", "--executor", "dask", "--scheduler", address)
        with subprocess.Popen(
            [sys.executable, "-m", "certlab_core.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        ) as runner:
            deadline = time.monotonic() + 120
            while not any(trials.iterdir()):
                assert runner.poll() is None and time.monotonic() < deadline, "no trial started"
                time.sleep(0.05)
            os.killpg(scheduler.pid, signal.SIGKILL)
            _, stderr = runner.communicate(timeout=120)
    store = run_store(out)
    assert runner.returncode == 3, stderr
    assert len(stderr.strip().splitlines()) == 2, stderr
    said, error = stderr.strip().splitlines()  # what it runs, then the one line
    assert said == f"certlab: running dask-exp into {store}"
    lost = "certlab: error: the executor dask's wait (certlab-executor-dask) raised ConnectionError: "
    lost += f"the Dask scheduler {address} is gone ("
    assert error.startswith(lost), error  # a Timed out OSError, or a CommClosedError, as the timing has it
    assert error.endswith(f"; stopped: 0 of 8 trials recorded; resume with certlab run --resume {store}"), error
    assert not any(running(int(trial.name)) for trial in trials.iterdir())  # the worker, stopping, ended it


def test_an_unreachable_scheduler_is_refused_in_one_line_before_any_trial(tmp_path: Path) -> None:
    path = descriptor(tmp_path)
    started = time.monotonic()
    done = certlab(
        "run", str(path), "--out", str(tmp_path / "out"), "--executor", "dask",
        "--scheduler", f"tcp://127.0.0.1:{free_port()}",
    )  # fmt: skip
    assert done.returncode == 4, done.stderr
    (message,) = done.stderr.strip().splitlines()
    assert "no Dask scheduler answers there" in message and "dask scheduler" in message
    assert "ConnectionRefusedError" in message  # the port refused: said at once, not after the client's timeout
    assert not (tmp_path / "out").exists()
    # Within the client's timeout: a refusal that waited it out takes at least that long. Half of it was too tight
    # for a whole certlab run (its start, discovery, Dask's import) on a loaded machine: 5.8 s at a load of 12.
    assert time.monotonic() - started < CONNECT_TIMEOUT_S


def test_a_port_that_accepts_and_stays_silent_is_refused_after_the_timeout_not_waited_on_forever() -> None:
    """Dask reads a scheduler's greeting with no time limit; the check before the client has one (0.5 s here)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)  # the kernel accepts connections; nothing ever answers them
        address = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
        check = f"from certlab_executor_dask.plugin import _check_reachable; _check_reachable({address!r}, 0.5)"
        done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1 and done.stderr.strip().splitlines()[-1] == "TimeoutError", done.stderr


def test_a_worker_without_the_manifests_plugins_at_its_versions_is_refused(
    cluster: dict[str, Any], tmp_path: Path
) -> None:
    mine = tmp_path / "driver-path"
    fake_distribution(mine, "certlab-f14probe", "0.0.1", "f14_never")
    conditions = [{"name": "calm", "bucket": "benign", "faults": [{"fault": "f14_never", "tool": "stock"}]}]
    path = descriptor(tmp_path, conditions=conditions)
    args = ("run", str(path), "--out", str(tmp_path / "out"), "--executor", "dask", "--scheduler", cluster["address"])
    done = certlab(*args, env={"PYTHONPATH": str(mine)})
    assert done.returncode == 4, done.stderr
    (message,) = done.stderr.strip().splitlines()
    assert "has certlab-f14probe 0.0.2, but this run needs certlab-f14probe 0.0.1" in message
    assert not (tmp_path / "out").exists()


def test_mismatched_names_the_first_worker_and_distribution_that_differ() -> None:  # a missing one too
    wanted = {"certlab": "0.1.0", "certlab-faults": "0.1.0"}
    assert mismatched(wanted, {"tcp://a:1": dict(wanted), "tcp://b:2": dict(wanted)}) is None
    problem = mismatched(wanted, {"tcp://a:1": dict(wanted), "tcp://b:2": {"certlab": "0.1.0"}})
    assert problem is not None and problem.startswith("the Dask worker tcp://b:2 does not have certlab-faults")


TASK_COUNT = """
import operator, sys
from distributed import Client
from distributed.diagnostics.plugin import SchedulerPlugin
from certlab_core.plugin import ExecutorOptions, Stage, Work
from certlab_executor_dask.plugin import start


class Count(SchedulerPlugin):
    name = "certlab-test-task-count"

    def __init__(self):
        self.tasks = 0

    def transition(self, key, start, finish, *args, **kwargs):
        if finish == "memory" and str(key).startswith("run_units-"):
            self.tasks += 1


address, trials = sys.argv[1], int(sys.argv[2])
with Client(address, set_as_default=False) as counting:
    counting.register_plugin(Count())
    session = start(ExecutorOptions(scheduler=address))
    stage = Stage(name="probe@test", call=operator.is_)  # call(None, arg): a short unit in a fresh process
    session.prepare([stage])
    queue, returned = list(range(trials)), 0
    while queue or session.busy():  # as the runner does: each trial's return sends its oracle
        while queue and session.busy() < session.slots:
            session.submit(Work(tag=("trial", queue.pop()), stage=stage, arg=1))
        for done in session.wait():
            assert done.failure is None, done.failure
            returned += 1
            if done.tag[0] == "trial":
                session.submit(Work(tag=("oracle", done.tag[1]), stage=stage, arg=2))
    session.close()
    tasks = counting.run_on_scheduler(lambda dask_scheduler: dask_scheduler.plugins[Count.name].tasks)
print(returned, tasks)
"""


def test_short_trials_travel_several_to_a_task(cluster: dict[str, Any]) -> None:
    """The scheduler's cost is per task: 200 short trials and their oracles take few tasks, not one or two each."""
    done = subprocess.run(
        [sys.executable, "-c", TASK_COUNT, cluster["address"], "200"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    returned, tasks = (int(word) for word in done.stdout.split())
    assert returned == 400
    assert tasks <= 0.35 * returned, f"{tasks} tasks for {returned} units"  # 8 to a task at most; was 0.6 a unit


def test_a_worker_loads_a_tool_world_runs_stages_without_the_runner(tmp_path: Path) -> None:
    """Every task's stages are unpickled on its worker, which imports their functions' modules: the trial machinery
    only. The runner (store, decision, manifest: 0.2 CPU s per worker) stayed in the warm-up of each of 8 workers."""
    import pickle

    from certlab_core._runtime.registry import discover
    from certlab_core.certify.acceptance import register_experiment_task
    from certlab_core.gate.descriptor import load_descriptor
    from certlab_core.gate.manifest import build_manifest
    from certlab_core.gate.runner import plan_run, trial_stages

    path = descriptor(tmp_path)
    registry = discover()
    register_experiment_task(registry, tmp_path)
    plan = plan_run(build_manifest(load_descriptor(path), path, registry), registry)
    (tmp_path / "stages.pickle").write_bytes(pickle.dumps(list(trial_stages(plan).values())))
    code = "import pickle, sys; pickle.loads(open(sys.argv[1], 'rb').read()); print(sorted(sys.modules))"
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "stages.pickle")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    loaded = done.stdout
    assert "'certlab_core.gate.trial'" in loaded
    assert "'certlab_core.gate.runner'" not in loaded and "'certlab_core.gate.store'" not in loaded


HOST_AT_START = """
import psutil
from certlab_core.plugin import ExecutorOptions
from certlab_executor_dask.plugin import start


def hosts():
    children = psutil.Process().children()
    return sum("zygote_host" in " ".join(child.cmdline()) for child in children)


session = start(ExecutorOptions(workers=2))
try:
    print(sorted(session._client.run(hosts).values()))
finally:
    session.close()
"""


def test_the_local_clusters_workers_start_their_zygote_hosts_as_they_start_and_leave_no_folder(
    tmp_path: Path,
) -> None:
    """Before any stage is known: the host's interpreter start is not in each worker's first warm-up, all at once.

    And the local cluster's workers work in a folder the run makes and removes: by default dask left its
    ``dask-scratch-space`` folder and lock files in the temp folder after every run on a local cluster."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", HOST_AT_START],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TMPDIR": str(temp)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[0] == "[1, 1]", done.stdout
    assert sorted(p.name for p in temp.iterdir()) == []


WORKER_LIFE = """
import json, os, resource, sys, time
from certlab_core.plugin import Stage
from certlab_core.sdk.executor import run_isolated
from certlab_executor_dask.worker_start import dask_setup, dask_teardown
import stage_code

dask_setup(None)
done = run_isolated(Stage(name="burn", call=stage_code.burn, preload=stage_code.nothing), None)
dask_teardown(None)
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"value": done.value, "children_cpu_s": usage.ru_utime + usage.ru_stime}))
"""

STAGE_CODE = """
import os, time

def nothing():
    return None

def burn(_preloaded, _arg):
    started = time.process_time()
    while time.process_time() - started < 0.5:
        pass
    zygote = os.getppid()
    with open(f"/proc/{zygote}/stat", encoding="ascii") as stat:
        return zygote, int(stat.read().rsplit(")", 1)[1].split()[1])
"""


def test_a_closing_worker_ends_its_zygotes_and_their_host_and_counts_their_cpu_time(tmp_path: Path) -> None:
    """A worker's trials run in its zygotes' forks, its zygotes in its host's: when the worker closes, they end
    before it, reaped by waiting parents, so the trials' CPU time reaches the worker's and so the run's own."""
    (tmp_path / "stage_code.py").write_text(STAGE_CODE)
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", WORKER_LIFE], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    said = json.loads(done.stdout)
    zygote, host = said["value"]
    assert not running(zygote) and not running(host)
    assert said["children_cpu_s"] >= 0.5  # the unit burnt 0.5 CPU s two generations down
    assert list(temp.iterdir()) == []


def running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie awaiting its reaper does not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class TestDaskConformance(ExecutorConformance):
    """ExecutorConformance on the module's cluster: fresh processes, every unit back once, failures as failures."""

    executor_name = "dask"

    @pytest.fixture(scope="class")
    @classmethod
    def executor_options(cls, cluster: dict[str, Any]) -> ExecutorOptions:
        return ExecutorOptions(workers=2, scheduler=cluster["address"])
