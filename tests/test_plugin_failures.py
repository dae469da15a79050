"""Every plugin failure is named, and none silently changes a verdict: real plugins, real ``certlab`` commands.

Each plugin below is installed as a third party's is found: a module and its dist-info (with
a ``certlab.plugins`` entry point) in a folder of its own, put on PYTHONPATH for that
scenario's commands only. An adapter whose ``run`` hangs is held to ``--agent-timeout``
(agent-timeout, and nothing it started survives); one that returns the wrong type is
agent-unavailable naming its plugin and distribution, with the bundle written; a plugin that
fails to load is one warning line on every command, and certify and run refuse while one is
installed; a hook no spec defines marks its plugin broken.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from conftest import CERTLAB_AS_IN_A_TERMINAL, run_certlab

from certlab_core.certify.lab import AGENT_GRACE_S

# The built-in plugins a certification of intervals needs, by entry point name.
BUILT_IN = ("intervals", "calibration", "policy", "suite", "acceptance", "sandbox-none", "executor-local")
# What a plugin call that never returns is said to have done, under CERTLAB_PLUGIN_LOAD_S=1.
HUNG = "did not return within 1 s (CERTLAB_PLUGIN_LOAD_S sets the wait)"

HANGING_ADAPTER = """
import os, subprocess, time
from pathlib import Path
from certlab_core.plugin import AgentAdapter, hookimpl

def run(request):
    # A helper of its own that would outlive it, then a Python loop that never returns.
    helper = subprocess.Popen(["sleep", "1000"], start_new_session=True)
    (Path(os.environ["HANG_PIDS"]) / str(os.getpid())).write_text(str(helper.pid))
    while True:
        time.sleep(0.05)

@hookimpl
def certlab_agents():
    return [AgentAdapter(name="hanger", description="its run never returns", run=run)]
"""

WRONG_TYPE_ADAPTER = """
from certlab_core.plugin import AgentAdapter, hookimpl

def run(request):
    return {"status": "completed"}

@hookimpl
def certlab_agents():
    return [AgentAdapter(name="dictator", description="returns a dict", run=run)]
"""

# A grader plugin that stops importing (it was fine at 1.0; 1.1 imports a module that is not there).
UNIMPORTABLE_GRADER = "import certlab_no_such_module  # noqa\n"

# A plugin whose hook name no spec defines: a misspelling of certlab_graders.
MISSPELT_HOOK = """
from certlab_core.plugin import GradeResult, Grader, hookimpl

def grade(request):
    return GradeResult(grader="misspelt", passed=True)

@hookimpl
def certlab_grader():
    return [Grader(name="misspelt", order=5, description="never called", grade=grade)]
"""


def site_with(root: Path, distribution: str, entry_point: str, source: str) -> Path:
    """A folder holding one installed plugin distribution: its module and its dist-info with the entry point."""
    site = root / distribution
    module = distribution.replace("-", "_")
    site.mkdir(parents=True)
    (site / f"{module}.py").write_text(textwrap.dedent(source))
    info = site / f"{module}-1.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 1.1\n")
    (info / "entry_points.txt").write_text(f"[certlab.plugins]\n{entry_point} = {module}\n")
    return site


def env_with(*sites: Path, only: tuple[str, ...] | None = None, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*(str(s) for s in sites), *filter(None, [env.get("PYTHONPATH", "")])])
    env.pop("CERTLAB_PLUGINS", None)
    if only is not None:
        env["CERTLAB_PLUGINS"] = ",".join(only)
    env.update(extra)
    return env


def certify(out: Path, agent: str, env: dict[str, str], *more: str) -> subprocess.CompletedProcess[str]:
    args = ("certify", "-f", "intervals", "-a", agent, "--no-mutants", "--sandbox", "none", "-q", "-o", str(out))
    return run_certlab(*args, *more, env=env, timeout=300)


def small_a_vs_a() -> str:
    """examples/retry/a_vs_a.yaml at 20 trials per arm, not 200: a run that decides, through every plugin kind."""
    example = (Path(__file__).resolve().parents[1] / "examples" / "retry" / "a_vs_a.yaml").read_text(encoding="utf-8")
    assert "\nn_per_arm: 200 " in example
    return example.replace("\nn_per_arm: 200 ", "\nn_per_arm: 20 ")


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_an_adapter_whose_run_never_returns_is_agent_timeout_and_nothing_it_started_survives(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    site = site_with(tmp_path, "certlab-hanger", "hanger", HANGING_ADAPTER)
    env = env_with(site, only=(*BUILT_IN, "hanger"), HANG_PIDS=str(pids))
    started = time.monotonic()
    done = certify(tmp_path / "out", "hanger", env, "--agent-timeout", "0.5", "-w", "3")
    took = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr  # a contract that says it fixed nothing
    assert "hanger fixed 0/6 (0 unavailable)" in done.stdout
    bundle = json.loads((tmp_path / "out" / "bundle.json").read_text())
    assert {(t["verdict"], t["failure_mode"]) for t in bundle["trials"]} == {("not-fixed", "agent-timeout")}
    detail = {t["agent_detail"] for t in bundle["trials"]}
    assert detail == {
        f"the adapter hanger of certlab-hanger 1.1 (plugin hanger): its run did not return within "
        f"{0.5 + AGENT_GRACE_S:g} s (the agent timeout plus {AGENT_GRACE_S:g} s); it was killed with its processes"
    }
    # Three workers, six trials: two rounds of the timeout and its grace (each worker taken again once its hung
    # adapter was killed), and no more.
    assert took < 2 * (0.5 + AGENT_GRACE_S) + 60
    adapters = sorted(pids.iterdir())
    assert len(adapters) == 6
    for written in adapters:
        assert not alive(int(written.name)), "the adapter's process outlived its trial"
        assert not alive(int(written.read_text())), "a process the adapter started outlived its trial"
    assert all(any("sleep 1000" in line for line in t["leftover_processes"]) for t in bundle["trials"])


def test_an_adapter_that_returns_the_wrong_type_is_agent_unavailable_naming_it_and_the_bundle_is_written(
    tmp_path: Path,
) -> None:
    site = site_with(tmp_path, "certlab-dictator", "dictator", WRONG_TYPE_ADAPTER)
    out = tmp_path / "out"
    done = certify(out, "dictator", env_with(site, only=(*BUILT_IN, "dictator")))
    assert done.returncode == 3, done.stdout + done.stderr
    assert "could not be run" not in done.stderr
    bundle = json.loads((out / "bundle.json").read_text())
    assert (out / "CONTRACT.md").exists()
    assert {(t["verdict"], t["failure_mode"]) for t in bundle["trials"]} == {("unavailable", "agent-unavailable")}
    said = "the adapter dictator of certlab-dictator 1.1 (plugin dictator) returned dict, not an AgentOutcome"
    assert {t["agent_detail"] for t in bundle["trials"]} == {said}


def test_preflight_holds_a_hung_adapter_to_its_timeout_and_names_a_wrong_return_type(tmp_path: Path) -> None:
    # Before: preflight ran the adapter's run in its own process with no time limit, so a hung adapter hung it
    # for good (its helper left running), and a run that returned a dict was "internal error: AttributeError".
    pids = tmp_path / "pids"
    pids.mkdir()
    hanger = site_with(tmp_path, "certlab-hanger", "hanger", HANGING_ADAPTER)
    dictator = site_with(tmp_path, "certlab-dictator", "dictator", WRONG_TYPE_ADAPTER)
    env = env_with(hanger, dictator, only=(*BUILT_IN, "hanger", "dictator"), HANG_PIDS=str(pids))
    hung = run_certlab("preflight", "--agent", "hanger", "--timeout", "0.5", env=env, timeout=120)
    assert hung.returncode == 3, hung.stdout + hung.stderr
    limit = 0.5 + AGENT_GRACE_S
    said = f"the adapter's run did not return within {limit:g} s (the timeout plus {AGENT_GRACE_S:g} s)"
    assert f"FAIL smoke call: {said}; it was killed with its processes" in hung.stdout.splitlines()
    ((adapter, helper),) = [(int(p.name), int(p.read_text())) for p in pids.iterdir()]
    assert not alive(adapter) and not alive(helper), "the hung adapter or the helper it started outlived preflight"
    wrong = run_certlab("preflight", "--agent", "dictator", env=env, timeout=120)
    assert wrong.returncode == 3 and wrong.stderr == "", wrong.stdout + wrong.stderr
    assert "FAIL smoke call: the adapter returned dict, not an AgentOutcome" in wrong.stdout.splitlines()


RAISING_COMMAND = """
import typer
from certlab_core.plugin import Command, hookimpl

def register(app: typer.Typer) -> None:
    @app.command("boom", help="Raises.")
    def boom() -> None:
        raise RuntimeError("the plugin's own bug")

@hookimpl
def certlab_commands():
    return [Command(name="boom", description="raises", register=register)]
"""


def test_a_plugin_command_that_raises_is_named_not_called_certlabs_internal_error(tmp_path: Path) -> None:
    # Before: "certlab: internal error: RuntimeError: the plugin's own bug", blaming certlab for a plugin's bug.
    site = site_with(tmp_path, "certlab-boom", "boom", RAISING_COMMAND)
    done = run_certlab("boom", env=env_with(site), timeout=120)
    assert done.returncode == 3, done.stderr
    assert done.stderr.strip().splitlines() == [
        "certlab: error: the command 'boom' of certlab-boom 1.1 (plugin boom) raised RuntimeError: the plugin's own "
        "bug (run again with --debug for the traceback)"
    ]


@pytest.fixture(scope="module")
def broken_grader(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return site_with(tmp_path_factory.mktemp("broken"), "certlab-no-notes", "no-notes", UNIMPORTABLE_GRADER)


def broken_line(stderr: str) -> str:
    (line,) = [line for line in stderr.splitlines() if "no-notes" in line and line.startswith("certlab: warning:")]
    return line


WARNING = (
    "certlab: warning: broken plugin no-notes (certlab-no-notes): "
    "ModuleNotFoundError: No module named 'certlab_no_such_module'"
)


@pytest.mark.parametrize("args", [("--help",), ("stats", "bounds", "--baseline", "9/10", "--candidate", "9/10")])
def test_a_plugin_that_fails_to_load_is_one_warning_line_on_every_command(broken_grader: Path, args: tuple) -> None:
    done = run_certlab(*args, env=env_with(broken_grader))
    assert done.returncode == 0, done.stderr
    assert broken_line(done.stderr) == WARNING


def test_certify_refuses_before_any_trial_while_a_plugin_that_cannot_import_is_installed(
    broken_grader: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    done = certify(out, "oracle", env_with(broken_grader))
    assert done.returncode == 4, done.stdout + done.stderr
    assert broken_line(done.stderr) == WARNING
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("certlab: error: certify refuses: the plugin no-notes (certlab-no-notes) is broken")
    assert "pip uninstall certlab-no-notes" in error and "CERTLAB_PLUGINS" in error
    assert not (out / "trials.journal.jsonl").exists() and not (out / "bundle.json").exists()


def test_run_refuses_while_a_plugin_that_cannot_import_is_installed(broken_grader: Path, tmp_path: Path) -> None:
    descriptor = Path(__file__).resolve().parent.parent / "examples" / "retry" / "a_vs_b.yaml"
    done = run_certlab("run", str(descriptor), "--out", str(tmp_path / "run"), env=env_with(broken_grader))
    assert done.returncode == 4, done.stdout + done.stderr
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith("certlab: error: run refuses: the plugin no-notes (certlab-no-notes) is broken")
    )
    assert not (tmp_path / "run" / "trials.jsonl").exists()


def test_a_broken_plugin_that_certlab_plugins_leaves_out_is_not_loaded_and_not_warned_about(
    broken_grader: Path,
) -> None:
    done = run_certlab("--help", env=env_with(broken_grader, only=BUILT_IN))
    assert done.returncode == 0 and "no-notes" not in done.stderr, done.stderr


def test_an_unknown_agent_names_the_broken_plugins_distribution_and_error(broken_grader: Path, tmp_path: Path) -> None:
    env = env_with(broken_grader, only=(*BUILT_IN, "no-notes"))
    done = run_certlab("preflight", "--agent", "semfix", env=env)
    assert done.returncode == 4, done.stdout + done.stderr
    assert (
        "plugins that failed to load: no-notes (certlab-no-notes): "
        "ModuleNotFoundError: No module named 'certlab_no_such_module'" in done.stderr.strip().splitlines()[-1]
    )


def test_a_hook_no_spec_defines_marks_its_plugin_broken(tmp_path: Path) -> None:
    site = site_with(tmp_path, "certlab-misspelt", "misspelt", MISSPELT_HOOK)
    env = env_with(site)
    listed = run_certlab("plugins", "--json", env=env)
    failures = json.loads(listed.stdout)["failures"]
    assert [(f["entry_point"], f["distribution"]) for f in failures] == [("misspelt", "certlab-misspelt")]
    assert "certlab_grader, which no certlab hook spec defines (did you mean certlab_graders?)" in failures[0]["error"]
    out = tmp_path / "out"
    done = certify(out, "oracle", env)
    assert done.returncode == 4, done.stdout + done.stderr
    assert "certify refuses: the plugin misspelt (certlab-misspelt, hook certlab_grader) is broken" in done.stderr


# Executors whose start breaks: each is named in one line, exit 3, before any trial (the default would run them).
BROKEN_EXECUTORS = {
    "stuck": "import time\n    while True:\n        time.sleep(0.05)",
    "dictator": "return {'slots': 2}",
    "raiser": "raise RuntimeError('no cluster here')",
}
BROKEN_EXECUTOR = """
from certlab_core.plugin import Executor, hookimpl

def start(options):
    {body}

@hookimpl
def certlab_executors():
    return [Executor(name="{name}", description="its start breaks", start=start)]
"""


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("stuck", "did not open a session within 1 s; nothing ran (CERTLAB_EXECUTOR_START_S sets the wait)"),
        ("dictator", "returned dict, not a session (no usable busy, prepare, submit, wait, close, slots); nothing ran"),
        ("raiser", "raised RuntimeError: no cluster here; nothing ran"),
    ],
)
def test_an_executor_whose_start_hangs_raises_or_returns_no_session_is_one_line_before_any_trial(
    tmp_path: Path, name: str, said: str
) -> None:
    source = BROKEN_EXECUTOR.format(body=BROKEN_EXECUTORS[name], name=name)
    site = site_with(tmp_path, f"certlab-{name}", name, source)
    env = env_with(site, only=(*BUILT_IN, name), CERTLAB_EXECUTOR_START_S="1")
    started = time.monotonic()
    done = certify(tmp_path / "cert", "oracle", env, "--executor", name)
    assert time.monotonic() - started < 60
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        f"certlab: error: the executor {name}'s start (certlab-{name}) {said}"
    ], done.stderr
    assert not (tmp_path / "cert" / "bundle.json").exists()


def test_a_start_deadline_that_is_no_number_is_refused_in_one_line(tmp_path: Path) -> None:
    env = env_with(only=BUILT_IN, CERTLAB_EXECUTOR_START_S="soon")
    done = certify(tmp_path / "cert", "oracle", env)
    assert done.returncode == 4 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "certlab: error: CERTLAB_EXECUTOR_START_S='soon': give the seconds an executor may take to start, e.g. 300"
    ]


# An executor whose session runs every unit (it is the local executor's) and breaks as $HOW says (its protocol,
# mid-run) or as $CLOSE says (as it closes, after the trials); {name} and {forks_here} are filled in by each test.
BREAKING_SESSION = """
import os, time
from certlab_core.plugin import Executor, WorkDone, hookimpl
from certlab_executor_local.plugin import start as local_start

class Session:
    def __init__(self, inner):
        self.inner, self.waited = inner, False
    @property
    def slots(self):
        return "many" if os.environ.get("HOW") == "slots" and self.waited else self.inner.slots
    def busy(self):
        return "two" if os.environ.get("HOW") == "busy" else self.inner.busy()
    def prepare(self, stages):
        return self.inner.prepare(stages)
    def submit(self, work):
        return self.inner.submit(work)
    def wait(self):
        how, self.waited = os.environ.get("HOW"), True
        if how == "raises":
            raise RuntimeError("lost the cluster")
        if how in ("none", "empty"):
            return None if how == "none" else []
        return [WorkDone(tag="a stranger")] if how == "stranger" else self.inner.wait()
    def close(self):
        self.inner.close()
        if os.environ.get("CLOSE") == "raises":
            raise RuntimeError("cannot close")
        while os.environ.get("CLOSE") == "hangs":
            time.sleep(0.05)

@hookimpl
def certlab_executors():
    start = lambda options: Session(local_start(options))
    return [Executor(name="{name}", description="it breaks", start=start, forks_here={forks_here})]
"""
BREAKING_CLOSE = BREAKING_SESSION.format(name="closer", forks_here=True)
BREAKING_WAIT = BREAKING_SESSION.format(name="waiter", forks_here=False)


@pytest.mark.parametrize(("how", "said"), [("raises", "raised RuntimeError: cannot close"), ("hangs", HUNG)])
def test_an_executor_whose_close_breaks_is_a_warning_and_the_verdict_and_exit_code_stand(
    tmp_path: Path, how: str, said: str
) -> None:
    """Its close was called bare: one that raised was an internal error (exit 3 for a run that PASSed), one that
    hung hung certify after the bundle was written."""
    site = site_with(tmp_path, "certlab-closer", "closer", BREAKING_CLOSE)
    env = env_with(site, only=(*BUILT_IN, "closer"), CLOSE=how, CERTLAB_PLUGIN_LOAD_S="1")
    warning = f"certlab: warning: the executor closer's close (certlab-closer) {said}"
    done = certify(tmp_path / "cert", "oracle", env, "--executor", "closer")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("certified: oracle fixed 6/6")
    assert done.stderr.strip().splitlines()[-1] == warning, done.stderr
    if how == "raises":  # the gate: the verdict's exit code, whatever the executor's close did
        runs, descriptor = tmp_path / "runs", tmp_path / "a_vs_a_small.yaml"
        every = env_with(site, CLOSE=how)  # the tool world, its faults and its rule too
        descriptor.write_text(small_a_vs_a(), encoding="utf-8")
        ran = run_certlab("run", str(descriptor), "--out", str(runs), "-q", "--executor", "closer", env=every)
        (decision,) = runs.glob("*/decision.json")
        assert ran.returncode == json.loads(decision.read_text())["exit_code"], ran.stdout + ran.stderr
        assert warning in ran.stderr.splitlines(), ran.stderr
        assert "internal error" not in ran.stderr


def test_interrupted_in_the_executors_close_certify_says_the_certification_is_written(tmp_path: Path) -> None:
    """Its line said "interrupted before the agent's trials began; nothing to resume: certify again" there."""
    site = site_with(tmp_path, "certlab-closer", "closer", BREAKING_CLOSE)
    out = tmp_path / "cert"
    args = ("certify", "-f", "intervals", "-a", "oracle", "--no-mutants", "--sandbox", "none", "-q", "-o", str(out))
    env = env_with(site, only=(*BUILT_IN, "closer"), CLOSE="hangs")  # the close waits out the whole plugin wait
    with subprocess.Popen(
        [*CERTLAB_AS_IN_A_TERMINAL, *args, "--executor", "closer"], env=env, stderr=subprocess.PIPE, text=True
    ) as certify_run:
        deadline = time.monotonic() + 120
        while not (out / "CONTRACT.md").exists() or (out / "trials.journal.jsonl").exists():
            assert certify_run.poll() is None and time.monotonic() < deadline, "the certification was not written"
            time.sleep(0.05)
        time.sleep(0.5)  # into the close
        certify_run.send_signal(signal.SIGINT)
        _, stderr = certify_run.communicate(timeout=60)
    assert certify_run.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1] == (
        f"certlab: interrupted after the certification was written to {out}; nothing to resume"
    ), stderr
    assert json.loads((out / "bundle.json").read_text())["summary"]["fixed"] == 6


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("raises", "wait (certlab-waiter) raised RuntimeError: lost the cluster"),
        ("none", "wait (certlab-waiter) returned NoneType, not a list of WorkDone"),
        ("busy", "busy (certlab-waiter) returned str, not a count of units"),
        ("slots", "slots (certlab-waiter) returned str, not a count of units"),
        ("stranger", "wait (certlab-waiter) returned a unit it was not given, or gave back already"),
        ("empty", "wait (certlab-waiter) returned no finished unit while units were out ("),  # 1 or 2 of them
    ],
)
def test_an_executor_session_that_breaks_its_protocol_mid_run_is_one_line(tmp_path: Path, how: str, said: str) -> None:
    """Each was an internal error ('NoneType' object is not iterable, '<' not supported between str and int, a
    KeyError), and a wait that answered nothing while units were out would have spun for ever. The line ends on
    how far the command got and how to go on (it did not say that what ran is kept, to resume)."""
    site = site_with(tmp_path, "certlab-waiter", "waiter", BREAKING_WAIT)
    env = env_with(site, only=(*BUILT_IN, "waiter"), HOW=how)
    fresh = ("--executor", "waiter", "--workers", "2", "--fresh-instrument")  # the proof's units come first
    done = certify(tmp_path / "cert", "oracle", env, *fresh)
    assert done.returncode == 3, done.stdout + done.stderr
    last = done.stderr.strip().splitlines()[-1]
    stands = "; stopped before the agent's trials began; nothing to resume: certify again"
    assert last.startswith(f"certlab: error: the executor waiter's {said}") and last.endswith(stands), last
    assert how == "empty" or last == f"certlab: error: the executor waiter's {said}{stands}"
    if how == "raises":  # the gate's runner holds its session to the same protocol; what it says to do works
        runs, descriptor = tmp_path / "runs", tmp_path / "a_vs_a_small.yaml"
        descriptor.write_text(small_a_vs_a(), encoding="utf-8")
        every = env_with(site, HOW=how)  # the tool world, its faults and its rule too
        ran = run_certlab("run", str(descriptor), "--out", str(runs), "-q", "--executor", "waiter", env=every)
        assert ran.returncode == 3, ran.stdout + ran.stderr
        (store,) = runs.iterdir()
        manifest = json.loads((store / "manifest.json").read_text())
        scheduled = 2 * manifest["n_per_arm"] * len(manifest["conditions"])  # 20 a side, 3 conditions
        assert ran.stderr.strip().splitlines()[-1] == (
            f"certlab: error: the executor waiter's {said}; stopped: 0 of {scheduled} trials recorded; "
            f"resume with certlab run --resume {store}"
        ), ran.stderr
        resumed = run_certlab("run", "--resume", str(store), "-q", env=every)  # on the executor local
        decision = json.loads((store / "decision.json").read_text())
        assert resumed.returncode == decision["exit_code"] != 3, resumed.stdout + resumed.stderr


# Plugins whose import or record hook never ends: a loop at import, a hook that waits for ever, a provider list's
# import that waits on a network. Each was a hang of every certlab command; now each is broken after
# CERTLAB_PLUGIN_LOAD_S, named in one line, and the commands answer.
IMPORT_LOOPS = "while True:\n    pass\n"

HOOK_WAITS = """
import time
from certlab_core.plugin import hookimpl

@hookimpl
def certlab_graders():
    time.sleep(3600)
"""

LIST_WAITS = "import time\ntime.sleep(3600)\nPROVIDERS = {}\n"


def test_a_plugin_whose_import_never_ends_is_broken_in_one_line_and_certify_refuses(tmp_path: Path) -> None:
    site = site_with(tmp_path, "certlab-looper", "looper", IMPORT_LOOPS)
    env = env_with(site, CERTLAB_PLUGIN_LOAD_S="1")
    listed = run_certlab("--help", env=env, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert (
        "certlab: warning: broken plugin looper (certlab-looper): "
        "its import did not finish within 1 s (CERTLAB_PLUGIN_LOAD_S sets the wait)" in listed.stderr.splitlines()
    ), listed.stderr
    done = certify(tmp_path / "out", "oracle", env)
    assert done.returncode == 4, done.stdout + done.stderr
    assert "certify refuses: the plugin looper (certlab-looper) is broken" in done.stderr


def test_a_hook_that_never_returns_its_records_marks_its_plugin_broken(tmp_path: Path) -> None:
    site = site_with(tmp_path, "certlab-waiter", "waiter", HOOK_WAITS)
    listed = run_certlab("plugins", "--json", env=env_with(site, CERTLAB_PLUGIN_LOAD_S="1"), timeout=60)
    assert listed.returncode == 0, listed.stderr
    (failure,) = json.loads(listed.stdout)["failures"]
    assert (failure["entry_point"], failure["distribution"], failure["hook"]) == (
        "waiter", "certlab-waiter", "certlab_graders"
    )  # fmt: skip
    assert failure["error"] == HUNG


def test_a_provider_list_whose_import_never_ends_is_left_out_in_one_line(tmp_path: Path) -> None:
    site = site_with(tmp_path, "certlab-lister", "lister", "")
    (site / "certlab_lister_list.py").write_text(LIST_WAITS)
    (site / "certlab_lister-1.1.dist-info" / "entry_points.txt").write_text(
        "[certlab.providers]\nlister = certlab_lister_list:PROVIDERS\n"
    )
    done = run_certlab("plugins", env=env_with(site, CERTLAB_PLUGIN_LOAD_S="1"), timeout=60)
    assert done.returncode == 0, done.stderr
    said = "lister (certlab-lister 1.1): its provider list (certlab.providers) is left out: its import did not finish"
    assert said in done.stdout + done.stderr, done.stdout + done.stderr


def test_a_plugin_load_wait_that_is_no_number_is_one_line_and_exit_4() -> None:
    done = run_certlab("plugins", env=env_with(CERTLAB_PLUGIN_LOAD_S="a minute"), timeout=60)
    assert done.returncode == 4, done.stdout + done.stderr
    assert done.stderr.strip() == (
        "certlab: error: CERTLAB_PLUGIN_LOAD_S='a minute': give the seconds a plugin's import may take, e.g. 60"
    )


# Reporters whose render breaks: `certlab report --format` and run's --junit/--markdown call them. A render that
# raised, or returned no text, was "internal error"; one that never returned hung the command.
BROKEN_REPORTER = """
import os, time
from certlab_core.plugin import Reporter, hookimpl

def render(report, rule):
    how = os.environ["HOW"]
    if how == "raises":
        raise RuntimeError("no template")
    if how == "hangs":
        while True:
            time.sleep(0.05)
    return None

@hookimpl
def certlab_reporters():
    return [Reporter(name="broken", description="breaks as HOW says", suffix=".txt", render=render)]
"""

ARCHIVED_BLOCK_STORE = Path(__file__).resolve().parent / "archived_stores" / "block"


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("raises", "raised RuntimeError: no template"),
        ("returns-none", "returned NoneType, not str"),
        ("hangs", "did not return within 1 s (CERTLAB_REPORTER_RENDER_S sets the wait)"),
    ],
)
def test_a_reporter_that_raises_returns_no_text_or_hangs_is_one_line(tmp_path: Path, how: str, said: str) -> None:
    site = site_with(tmp_path, "certlab-broken-report", "broken-report", BROKEN_REPORTER)
    env = env_with(site, HOW=how, CERTLAB_REPORTER_RENDER_S="1")
    done = run_certlab("report", str(ARCHIVED_BLOCK_STORE), "--format", "broken", env=env, timeout=60)
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stderr.strip() == f"certlab: error: the reporter broken's render (certlab-broken-report) {said}"


# An adapter's quick callables (its version, its argument check), which certify and run call in the harness.
ODD_ADAPTER = """
import os, time
from certlab_core.plugin import AgentAdapter, AgentOutcome, hookimpl

def version(args, harness):
    how = os.environ["HOW"]
    if how == "version-raises":
        raise FileNotFoundError("odd: no such program")
    if how == "version-hangs":
        while True:
            time.sleep(0.05)
    return 3 if how == "version-int" else "1.0"

def check_args(args):
    if os.environ["HOW"] == "check-raises":
        raise KeyError("--model")

def preflight(args, harness):
    return {"binary": "ok"} if os.environ["HOW"] == "preflight-dict" else []

def programs(args):
    how = os.environ["HOW"]
    if how == "programs-raises":
        raise PermissionError("odd: cannot look")
    if how == "programs-hangs":
        while True:
            time.sleep(0.05)
    return []

def run(request):
    return AgentOutcome(status="completed")

@hookimpl
def certlab_agents():
    return [
        AgentAdapter(
            name="odd", description="odd callables", run=run, version=version, check_args=check_args,
            preflight=preflight, programs=programs,
        )
    ]
"""


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("version-raises", "version (certlab-odd) raised FileNotFoundError: odd: no such program"),
        ("version-hangs", "version (certlab-odd) did not return within 1 s (CERTLAB_PLUGIN_LOAD_S sets the wait)"),
        ("version-int", "version (certlab-odd) returned int, not str or None"),
        ("check-raises", "argument check (certlab-odd) raised KeyError: '--model'"),
    ],
)
def test_an_adapters_version_or_argument_check_that_breaks_is_one_line_before_any_trial(
    tmp_path: Path, how: str, said: str
) -> None:
    site = site_with(tmp_path, "certlab-odd", "odd", ODD_ADAPTER)
    out = tmp_path / "out"
    done = certify(out, "odd", env_with(site, only=(*BUILT_IN, "odd"), HOW=how, CERTLAB_PLUGIN_LOAD_S="1"))
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stderr.strip().splitlines()[-1] == f"certlab: error: the agent odd's {said}"
    assert not (out / "bundle.json").exists()


def test_the_same_callables_are_one_line_in_run_and_preflight(tmp_path: Path) -> None:
    site = site_with(tmp_path, "certlab-odd", "odd", ODD_ADAPTER)
    descriptor = {
        "experiment": "odd-arms",
        "task": {"family": "intervals", "defects": ["length-counts-end"]},
        "oracle": "graders",
        "arms": {"baseline": {"adapter": "odd"}, "candidate": {"adapter": "odd"}},
        "conditions": [{"name": "clean", "bucket": "benign"}],
        "n_per_arm": 2,
        "budgets": {"seconds": 60},
    }
    (tmp_path / "certlab.yaml").write_text(json.dumps(descriptor))
    for how, said in (
        ("version-raises", "version (certlab-odd) raised FileNotFoundError: odd: no such program"),
        ("check-raises", "argument check (certlab-odd) raised KeyError: '--model'"),
    ):
        env = env_with(site, HOW=how)
        done = run_certlab("run", "certlab.yaml", "--out", "runs", "-q", cwd=tmp_path, env=env, timeout=120)
        assert done.returncode == 3, done.stdout + done.stderr
        assert done.stderr.strip().splitlines()[-1] == f"certlab: error: the agent odd's {said}"
        assert not (tmp_path / "runs").exists()
    done = run_certlab("preflight", "--agent", "odd", env=env_with(site, HOW="preflight-dict"), timeout=60)
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stderr.strip() == (
        "certlab: error: the agent odd's preflight (certlab-odd) returned dict, not a list of PreflightCheck"
    )


# A grader whose check of a passed trial's changes raises (its grading itself passes).
RAISING_CHANGES_CHECK = """
from certlab_core.plugin import GradeResult, Grader, hookimpl

def grade(request):
    return GradeResult(grader="judge", passed=True)

def check_changes(request, changes):
    raise RuntimeError("judge broke")

@hookimpl
def certlab_graders():
    return [Grader(name="judge", order=90, description="judges the changes", grade=grade, check_changes=check_changes)]
"""


def test_a_graders_check_of_the_changes_that_raises_is_named_per_trial_and_the_bundle_is_written(
    tmp_path: Path,
) -> None:
    site = site_with(tmp_path, "certlab-judge", "judge", RAISING_CHANGES_CHECK)
    out = tmp_path / "out"
    done = certify(out, "oracle", env_with(site, only=(*BUILT_IN, "judge")))
    assert done.returncode == 3, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "could not be run" not in done.stderr
    problems = [line for line in done.stderr.splitlines() if line.startswith("problem: calibration ")]
    assert len(problems) >= 6 and all(
        line.endswith(": grader judge's check of the changes raised RuntimeError: judge broke") for line in problems
    ), done.stderr
    assert "NOT certified" in done.stdout and (out / "CONTRACT.md").exists()
    assert json.loads((out / "bundle.json").read_text())["trials"] == []  # refused at calibration: no verdict


# A statistical rule that marks itself the default, whose interval and decide break as $HOW says.
ODD_RULE = """
import os, time
from certlab_core.plugin import StatisticalRule, hookimpl

def broken(*_counts):
    how = os.environ["HOW"]
    if how == "raises":
        raise RuntimeError("no bounds today")
    if how == "hangs":
        while True:
            time.sleep(0.05)
    return "wide"

@hookimpl
def certlab_statistical_rules():
    return [StatisticalRule(name="odd-rule", description="breaks", decide=broken, interval=broken, default=True)]
"""
RULE_BREAKS = [
    ("raises", "raised RuntimeError: no bounds today"),
    ("hangs", HUNG),
    ("answers-no-bounds", "returned str, not tuple or list"),
]


@pytest.mark.parametrize(("how", "said"), RULE_BREAKS, ids=[how for how, _said in RULE_BREAKS])
def test_a_default_rule_whose_interval_breaks_is_one_line_before_any_trial(tmp_path: Path, how: str, said: str) -> None:
    site = site_with(tmp_path, "certlab-odd-rule", "odd-rule", ODD_RULE)
    out = tmp_path / "out"
    env = env_with(site, only=(*BUILT_IN, "odd-rule"), HOW=how, CERTLAB_PLUGIN_LOAD_S="1")
    done = certify(out, "oracle", env, "--trials", "2")
    assert done.returncode == 3, done.stdout + done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last == f"certlab: error: the statistical rule odd-rule's interval (certlab-odd-rule) {said}"
    assert not (out / "trials.journal.jsonl").exists() and not (out / "bundle.json").exists()


def test_a_rule_whose_decide_never_returns_is_error_at_the_look_not_a_hang(tmp_path: Path) -> None:
    site = site_with(tmp_path, "certlab-odd-rule", "odd-rule", ODD_RULE)
    descriptor = (Path(__file__).resolve().parent.parent / "examples" / "retry" / "a_vs_b.yaml").read_text()
    descriptor = descriptor.replace("name: clopper-pearson", "name: odd-rule").replace("n_per_arm: 200", "n_per_arm: 3")
    (tmp_path / "certlab.yaml").write_text(descriptor)
    env = env_with(
        site, only=("retry-world", "faults", "executor-local", "sandbox-none", "odd-rule"), HOW="hangs",
        CERTLAB_PLUGIN_LOAD_S="1",
    )  # fmt: skip
    done = run_certlab("run", "certlab.yaml", "--out", "runs", "-q", cwd=tmp_path, env=env, timeout=120)
    assert done.returncode == 3, done.stdout + done.stderr
    said = "problem: the rule odd-rule did not return within 1 s (CERTLAB_PLUGIN_LOAD_S sets the wait)"
    assert said in done.stdout.splitlines() and "verdict: ERROR" in done.stdout, done.stdout
    (store,) = (tmp_path / "runs").iterdir()
    assert json.loads((store / "decision.json").read_text())["verdict"] == "ERROR"


# A grader whose serve (started once per containment, before the trials it serves) breaks as $HOW says.
BREAKING_SERVE = """
import contextlib, os, time
from certlab_core.plugin import GradeResult, Grader, hookimpl

def grade(request):
    return GradeResult(grader="server", passed=True)

@contextlib.contextmanager
def serve(containment, slots, environments):
    if os.environ["HOW"] == "raises":
        raise RuntimeError("no server today")
    while True:
        time.sleep(0.05)
    yield

@hookimpl
def certlab_graders():
    return [Grader(name="server", order=90, description="serves", grade=grade, serve=serve)]
"""


def bwrap_missing() -> str | None:
    try:
        from certlab_sandbox_bwrap.plugin import probe
    except ImportError:
        return "certlab-sandbox-bwrap is not installed"
    return probe()


@pytest.mark.skipif(bwrap_missing() is not None, reason=f"a grader serves contained trials only: {bwrap_missing()}")
@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("raises", "raised RuntimeError: no server today"),
        ("hangs", HUNG),
    ],
)
def test_a_graders_serve_that_breaks_is_one_line_before_the_agents_first_trial(
    tmp_path: Path, how: str, said: str
) -> None:
    site = site_with(tmp_path, "certlab-server", "server", BREAKING_SERVE)
    only = (*(name for name in BUILT_IN if name != "sandbox-none"), "sandbox-bwrap", "server")
    out = tmp_path / "out"
    args = ("certify", "-f", "intervals", "-a", "oracle", "--no-mutants", "--sandbox", "bwrap", "-q", "-o", str(out))
    # The wait is cut to 1 s for the hang alone: it bounds the built-in services' leaving too.
    wait = {"CERTLAB_PLUGIN_LOAD_S": "1"} if how == "hangs" else {}
    done = run_certlab(*args, env=env_with(site, only=only, HOW=how, **wait), timeout=120)
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stderr.strip().splitlines()[-1] == f"certlab: error: the grader server's serve {said}"
    assert "warning" not in done.stderr, done.stderr  # the suite's servers, killed at once, left in time
    assert not (out / "bundle.json").exists()


CODING_RUN = """
schema: certlab.experiment/1
experiment: served
task: {family: intervals, defects: [length-counts-end]}
oracle: graders
arms: {baseline: {adapter: oracle}, candidate: {adapter: "null"}}
conditions: [{name: clean, bucket: benign}]
rule: {name: clopper-pearson, alpha: 0.05, delta: 0.1, looks: 1}
n_per_arm: 2
budgets: {seconds: 30}
"""


@pytest.mark.skipif(bwrap_missing() is not None, reason=f"a grader serves contained trials only: {bwrap_missing()}")
def test_a_graders_serve_that_breaks_stops_a_coding_run_in_one_line_before_its_first_trial(tmp_path: Path) -> None:
    # A coding run's gradings are served as certify's are: the serve that raises is the run's one error line.
    site = site_with(tmp_path, "certlab-server", "server", BREAKING_SERVE)
    only = (*(name for name in BUILT_IN if name != "sandbox-none"), "sandbox-bwrap", "clopper-pearson", "server")
    (tmp_path / "exp.yaml").write_text(CODING_RUN)
    out = tmp_path / "out"
    args = ("run", str(tmp_path / "exp.yaml"), "--sandbox", "bwrap", "-q", "-o", str(out))
    done = run_certlab(*args, env=env_with(site, only=only, HOW="raises"), timeout=120)
    assert done.returncode == 3, done.stdout + done.stderr
    assert (
        done.stderr.strip().splitlines()[-1]
        == "certlab: error: the grader server's serve raised RuntimeError: no server today"
    )
    (store,) = out.iterdir()
    assert (store / "trials.jsonl").read_text() == "" and not (store / "decision.json").exists()


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("programs-raises", "raised PermissionError: odd: cannot look"),
        ("programs-hangs", HUNG),
    ],
)
def test_an_adapters_programs_that_break_are_one_line_before_any_trial(tmp_path: Path, how: str, said: str) -> None:
    site = site_with(tmp_path, "certlab-odd", "odd", ODD_ADAPTER)
    out = tmp_path / "out"
    done = certify(out, "odd", env_with(site, only=(*BUILT_IN, "odd"), HOW=how, CERTLAB_PLUGIN_LOAD_S="1"))
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stderr.strip().splitlines()[-1] == f"certlab: error: the adapter odd's programs() {said}"
    assert not (out / "bundle.json").exists()


# A fault whose parameter check breaks as $HOW says (it never refuses, and never fires).
ODD_FAULT = """
import os, time
from certlab_core.plugin import Fault, hookimpl

def check_params(params):
    if os.environ["HOW"] == "raises":
        raise TypeError("params is not a dict")
    while True:
        time.sleep(0.05)

@hookimpl
def certlab_faults():
    return [Fault(name="odd_fault", description="an odd check", inject=lambda context: None,
                  check_params=check_params)]
"""


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("raises", "raised TypeError: params is not a dict"),
        ("hangs", HUNG),
    ],
)
def test_a_faults_parameter_check_that_breaks_is_one_line_before_any_trial(tmp_path: Path, how: str, said: str) -> None:
    site = site_with(tmp_path, "certlab-odd-fault", "odd-fault", ODD_FAULT)
    descriptor = (Path(__file__).resolve().parent.parent / "examples" / "retry" / "a_vs_b.yaml").read_text()
    descriptor = descriptor.replace("{fault: latency, tool: stock,", "{fault: odd_fault, tool: stock,")
    (tmp_path / "odd_fault.yaml").write_text(descriptor)
    env = env_with(site, HOW=how, CERTLAB_PLUGIN_LOAD_S="1")
    done = run_certlab("run", "odd_fault.yaml", "--out", "runs", "-q", cwd=tmp_path, env=env, timeout=120)
    assert done.returncode == 3, done.stdout + done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last == f"certlab: error: the fault odd_fault's parameter check (certlab-odd-fault) {said}"
    assert not (tmp_path / "runs").exists()


# A sandbox that works by its probe and whose launch breaks as $HOW says.
ODD_SANDBOX = """
import os, sys, time
from certlab_core.plugin import hookimpl
from certlab_core.plugin.types.sandbox import Sandbox

def launch(request):
    if os.environ["HOW"] == "raises":
        raise RuntimeError("no namespace today")
    if os.environ["HOW"] == "dict":
        return {"argv": list(request.argv)}
    while True:
        time.sleep(0.05)

@hookimpl
def certlab_sandboxes():
    return [Sandbox(name="odd", description="an odd sandbox", probe=lambda: None, launch=launch,
                    python=lambda: sys.executable)]
"""


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("raises", "raised RuntimeError: no namespace today"),
        ("dict", "returned dict, not SandboxLaunch"),
        ("hangs", HUNG),
    ],
)
def test_a_sandboxs_launch_that_breaks_is_one_line_before_any_trial(tmp_path: Path, how: str, said: str) -> None:
    # Before: certify's check of the agent's programs launched them through the sandbox in its own process: a launch
    # that raised or answered a dict was "certlab: internal error", and one that never returned held certify for good.
    site = site_with(tmp_path, "certlab-odd-sandbox", "odd-sandbox", ODD_SANDBOX)
    only = (*(name for name in BUILT_IN if name != "sandbox-none"), "command", "odd-sandbox")
    out = tmp_path / "out"
    args = ("certify", "-f", "intervals", "-a", "command", "--agent-arg", "/bin/true", "--sandbox", "odd")
    env = env_with(site, only=only, HOW=how, CERTLAB_PLUGIN_LOAD_S="1")
    done = run_certlab(*args, "--no-mutants", "-q", "-o", str(out), env=env, timeout=120)
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stderr.strip().splitlines()[-1] == f"certlab: error: the sandbox odd's launch {said}"
    assert not (out / "bundle.json").exists()
