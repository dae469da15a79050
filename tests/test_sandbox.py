"""The sandbox in a certification: the answer key out of reach of the agent and of the graders that run its code.

The measured failure of issue 12: an agent that copies the installed family's clean source
(``certlab_intervals/family/tree/intervals.py``) was certified 6/6 fixed.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
import time
from pathlib import Path

import attrs
import pytest
from conftest import run_certlab

from certlab_core._runtime.containment import choose_containment
from certlab_core._runtime.registry import Registry
from certlab_core.certify.lab import Task, TrialRecord, TrialSpec, run_trial
from certlab_core.plugin.errors import UsageError
from certlab_core.plugin.types.sandbox import (
    PASSED_VARIABLES,
    Containment,
    ResourceLimits,
    Sandbox,
    SandboxLaunch,
    SandboxRequest,
)
from certlab_core.sdk.forking import call_in_fork
from certlab_core.sdk.grading import grader_chain

bwrap_plugin = pytest.importorskip("certlab_sandbox_bwrap.plugin")
REASON = bwrap_plugin.probe()
needs_bwrap = pytest.mark.skipif(REASON is not None, reason=f"no bwrap sandbox here: {REASON}")


def clean_source() -> Path:
    import certlab_intervals

    return Path(certlab_intervals.__file__).parent / "family" / "tree" / "intervals.py"


def script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@needs_bwrap
def test_an_agent_copying_the_installed_clean_source_certifies_nothing_in_the_sandbox(tmp_path: Path) -> None:
    """6/6 on the old code; the default (auto, bwrap here) hides the installed family: 0/6, and the evidence says so."""
    agent = script(tmp_path, "copier.sh", f"cp {clean_source()} intervals.py")
    out = tmp_path / "out"
    done = run_certlab("certify", "-f", "intervals", "-a", "command", "--agent-arg", str(agent), "-o", str(out), "-q")
    assert done.returncode == 0, done.stderr
    bundle = json.loads((out / "bundle.json").read_text())
    assert [t["verdict"] for t in bundle["trials"]] == ["not-fixed"] * 6
    assert bundle["containment"]["sandbox"] == "bwrap" and bundle["containment"]["limits"]["processes"] > 0
    contract = (out / "CONTRACT.md").read_text()
    assert "- Containment: the `bwrap` sandbox" in contract
    assert str(tmp_path) not in json.dumps(bundle["containment"])  # no path of this machine in the evidence


def test_sandbox_bwrap_refuses_in_one_line_when_bubblewrap_is_missing(tmp_path: Path) -> None:
    env = dict(os.environ, PATH=str(tmp_path))  # no bwrap on this PATH
    done = run_certlab(
        "certify", "-f", "intervals", "-a", "oracle", "--sandbox", "bwrap", "-o", str(tmp_path / "o"), env=env
    )
    assert done.returncode == 4
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--sandbox bwrap" in lines[0] and "bubblewrap" in lines[0]
    assert not (tmp_path / "o" / "bundle.json").exists()


class NoSandboxes:
    def all(self, kind: str) -> dict[str, object]:
        return {}


def test_auto_without_a_sandbox_runs_uncontained_with_one_warning_line() -> None:
    warnings: list[str] = []
    containment = choose_containment(NoSandboxes(), "auto", [], warnings.append)
    assert not containment.contained and containment.name == "none"
    assert len(warnings) == 1 and warnings[0].startswith("warning: no sandbox:")
    assert "uncontained" in containment.document()["note"]


def test_none_is_the_explicit_opt_out_and_says_so() -> None:
    from certlab_sandbox_none.plugin import certlab_sandboxes

    warnings: list[str] = []
    containment = choose_containment(Installed(*certlab_sandboxes()), "none", [], warnings.append)
    assert containment.sandbox is None
    assert warnings == [] and containment.document() == {
        "sandbox": "none",
        "limits": None,
        "note": "--sandbox none: the agent ran as the user, uncontained",
        "environment": list(PASSED_VARIABLES),
    }


def trial(registry: Registry, command: str, containment: Containment | None) -> TrialRecord:
    family = registry.get("task_families", "intervals")
    spec = TrialSpec(
        Task(family, family.defects[0]),
        registry.get("agents", "command"),
        1,
        agent_args=(command,),
        agent_timeout_s=60,
        containment=containment,
    )
    record = call_in_fork(run_trial, spec, grader_chain(registry))
    assert isinstance(record, TrialRecord)
    return record


@needs_bwrap
def test_the_graders_run_the_agents_code_out_of_the_keys_reach_too(registry: Registry, tmp_path: Path) -> None:
    """The agent writes a module that loads the clean source when the graders import it: fixed uncontained only."""
    trojan = f"exec(open({str(clean_source())!r}).read())"
    command = f"printf '%s\\n' {json.dumps(trojan)} > intervals.py"
    uncontained = trial(registry, command, None)
    assert uncontained.verdict == "fixed"  # what --sandbox none allows, said in docs/trust-model.md
    hidden = [str(clean_source().parent)]
    contained = trial(registry, command, choose_containment(registry, "bwrap", hidden, lambda _l: None))
    assert contained.verdict == "not-fixed" and contained.failure_mode in ("suite-failed", "suite-not-run")


@needs_bwrap
def test_exceeding_a_limit_is_the_trials_named_failure_and_the_harness_goes_on(
    registry: Registry, tmp_path: Path
) -> None:
    chosen = choose_containment(registry, "bwrap", [], lambda _l: None)
    small = Containment(chosen.sandbox, chosen.hidden, ResourceLimits(file_bytes=1 << 20))
    record = trial(registry, "head -c 4000000 /dev/zero > big.bin", small)
    assert record.failure_mode == "agent-resource-limit" and record.verdict == "not-fixed"
    assert record.grades == ()  # nothing of it was graded
    again = trial(registry, "true", small)
    assert again.failure_mode != "agent-resource-limit"


@needs_bwrap
def test_run_seals_the_containment_of_its_coding_arms_and_applies_it(tmp_path: Path) -> None:
    import yaml

    copier = script(tmp_path, "copier.sh", f"cp {clean_source()} intervals.py")
    descriptor = {
        "schema": "certlab.experiment/1",
        "experiment": "sandboxed-arms",
        "task": {"family": "intervals", "defects": ["length-counts-end"]},
        "oracle": "graders",
        "arms": {
            "baseline": {"adapter": "command", "args": [str(copier)]},
            "candidate": {"adapter": "command", "args": [str(copier)]},
        },
        "conditions": [{"name": "clean", "bucket": "benign"}],
        "rule": {"name": "clopper-pearson", "alpha": 0.05, "delta": 0.1, "looks": 1},
        "n_per_arm": 1,
        "seed": 1,
        "budgets": {"seconds": 60},
    }
    (tmp_path / "certlab.yaml").write_text(yaml.safe_dump(descriptor, sort_keys=False))
    done = run_certlab("run", "certlab.yaml", "--out", "runs", "--quiet", "--sandbox", "bwrap", cwd=tmp_path)
    (store,) = (tmp_path / "runs").iterdir()
    assert json.loads((store / "manifest.json").read_text())["sandbox"] == "bwrap", done.stderr
    lines = [json.loads(line) for line in (store / "trials.jsonl").read_text().splitlines()]
    assert [line["outcome"] for line in lines] == ["failure", "failure"]  # the clean source was out of reach
    assert all(line["agent"]["leftover_processes"] == [] for line in lines)  # the sandbox took its processes along


@needs_bwrap
def test_regrade_runs_the_bundles_code_in_the_sandbox(tmp_path: Path) -> None:
    """A bundle whose changes load the clean source on import, certified uncontained: regrade no longer agrees."""
    trojan = f"exec(open({str(clean_source())!r}).read())"
    agent = script(tmp_path, "trojan.sh", f"printf '%s\\n' {json.dumps(trojan)} > intervals.py")
    out = tmp_path / "out"
    done = run_certlab(
        "certify", "-f", "intervals", "-a", "command", "--agent-arg", str(agent), "--sandbox", "none", "-o", str(out)
    )
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "bundle.json").read_text())["summary"]["fixed"] == 6  # what uncontained allows
    regraded = run_certlab("regrade", str(out), "-q")
    assert regraded.returncode == 1, regraded.stdout + regraded.stderr
    assert "inside the sandbox bwrap" in regraded.stdout and "regrade: mismatch" in regraded.stdout


@needs_bwrap
def test_replay_of_a_certified_trial_runs_its_agent_in_the_sandbox_too(tmp_path: Path) -> None:
    """``replay --trial`` re-ran the certification's adapter uncontained: an agent that reaches for the installed
    clean source, held off in the certification, got it in the replay (not reproduced: fixed). Now it is
    contained as certified, and the replay reproduces the recorded verdict."""
    from certlab_scripted_models import Reply, ScriptedModelServer

    call = (
        "import http.client, json, os, urllib.parse; u = urllib.parse.urlsplit(os.environ['ANTHROPIC_BASE_URL']); "
        "c = http.client.HTTPConnection(u.hostname, u.port, timeout=20); "
        "body = {'model': 'm', 'max_tokens': 10, 'messages': [{'role': 'user', 'content': 'fix it'}]}; "
        "c.request('POST', '/v1/messages', body=json.dumps(body), "
        "headers={'x-api-key': os.environ['ANTHROPIC_API_KEY'], 'content-type': 'application/json'}); "
        "print(c.getresponse().status)"
    )
    agent = script(tmp_path, "asks-then-copies.sh", f'python3 -c "{call}"\ncp {clean_source()} intervals.py')
    out = tmp_path / "out"
    with ScriptedModelServer([Reply(text="copy the clean file")], anthropic_sse=False) as server:
        env = dict(os.environ, ANTHROPIC_BASE_URL=server.base_url, ANTHROPIC_API_KEY="sk-test-key")
        done = run_certlab(
            "certify", "-f", "intervals", "-a", "command", "--agent-arg", str(agent), "-o", str(out), "-q", env=env
        )
    assert done.returncode == 0, done.stdout + done.stderr
    first = json.loads((out / "bundle.json").read_text())["trials"][0]
    assert first["verdict"] == "not-fixed" and [e["status"] for e in first["model"]["events"]] == ["ok"]
    offline = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    replayed = run_certlab("replay", str(out), "--trial", first["id"], env=offline)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "inside the sandbox bwrap" in replayed.stdout and "reproduced: not-fixed" in replayed.stdout
    uncontained = run_certlab("replay", str(out), "--trial", first["id"], "--sandbox", "none", env=offline)
    assert uncontained.returncode == 1, uncontained.stdout + uncontained.stderr  # what the old replay did
    assert "but uncontained" in uncontained.stdout and "replayed fixed" in uncontained.stdout


def passthrough(name: str, works: bool, auto_order: int | None, hint: str = "") -> Sandbox:
    """A sandbox record of a third party's: it launches the program as it is (the choice is what is tested)."""

    def launch(request: SandboxRequest) -> SandboxLaunch:
        return SandboxLaunch(argv=request.argv, env=request.env)

    return Sandbox(
        name=name,
        description=f"the {name} test sandbox",
        probe=lambda: None if works else f"{name} does not work here",
        launch=launch,
        python=lambda: sys.executable,
        auto_order=auto_order,
        install_hint=hint,
    )


class Installed:
    def __init__(self, *sandboxes: Sandbox) -> None:
        self.sandboxes = {s.name: s for s in sandboxes}

    def all(self, kind: str) -> dict[str, object]:
        return dict(self.sandboxes) if kind == "sandboxes" else {}


def test_any_installed_sandbox_is_chosen_by_its_name() -> None:
    installed = Installed(passthrough("jail", True, None), passthrough("cell", True, 1))
    chosen = choose_containment(installed, "jail", [], lambda _l: None)
    assert chosen.contained and chosen.name == "jail"  # refused as "not one of auto, bwrap, none" before


def test_auto_takes_the_first_working_sandbox_in_its_order_and_never_one_chosen_only_by_name() -> None:
    installed = Installed(
        passthrough("broken", False, 1), passthrough("cell", True, 5), passthrough("jail", True, None)
    )
    warnings: list[str] = []
    chosen = choose_containment(installed, "auto", [], warnings.append)
    assert (chosen.name, warnings) == ("cell", [])
    only_by_name = choose_containment(Installed(passthrough("jail", True, None)), "auto", [], warnings.append)
    assert not only_by_name.contained and len(warnings) == 1 and "no sandbox is installed" in warnings[0]


def test_a_named_sandbox_that_does_not_work_or_is_not_installed_is_one_line() -> None:
    installed = Installed(passthrough("cell", False, 1, hint="install cells (apt-get install cells)"))
    with pytest.raises(UsageError) as broken:
        choose_containment(installed, "cell", [], lambda _l: None)
    assert broken.value.message == (
        "--sandbox cell: cell does not work here; install cells (apt-get install cells), or use --sandbox auto"
    )
    with pytest.raises(UsageError) as unknown:
        choose_containment(installed, "jail", [], lambda _l: None)
    assert unknown.value.message == "--sandbox 'jail' is not one of auto or a sandbox (cell)"


def test_a_built_in_sandbox_that_certlab_plugins_leaves_out_says_so_not_to_install_it() -> None:
    # The none sandbox is a plugin now: with CERTLAB_PLUGINS narrowing the plugins, "pip install" was the advice.
    from certlab_core._runtime.containment import check_choice

    with pytest.raises(UsageError) as left_out:
        check_choice("none", {}, {"sandbox-none": "certlab-sandbox-none"})
    assert left_out.value.message == (
        "--sandbox none: the sandbox 'none' is certlab-sandbox-none's, installed but left out by CERTLAB_PLUGINS; "
        "add sandbox-none to CERTLAB_PLUGINS"
    )
    with pytest.raises(UsageError, match="not installed; pip install certlab-sandbox-none"):
        check_choice("none", {}, {})
    # certlab-sandbox-none's own tests run it through certify with CERTLAB_PLUGINS narrowed.


def test_a_probe_that_raises_or_answers_nonsense_is_named_never_a_traceback() -> None:
    def raising() -> str | None:
        raise RuntimeError("no cells today")

    broken = attrs.evolve(passthrough("cell", True, 1), probe=raising)
    odd = attrs.evolve(passthrough("jail", True, 2), probe=lambda: 42)
    warnings: list[str] = []
    chosen = choose_containment(Installed(broken, odd), "auto", [], warnings.append)
    assert not chosen.contained and len(warnings) == 1
    assert "cell's probe raised RuntimeError: no cells today" in warnings[0]
    assert "jail's probe returned int, not a line or None" in warnings[0]
    with pytest.raises(UsageError, match="cell's probe raised RuntimeError"):
        choose_containment(Installed(broken), "cell", [], lambda _l: None)


def test_a_probe_that_hangs_is_named_after_its_deadline_and_a_running_timer_is_put_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from certlab_core._runtime import containment

    def hanging() -> str | None:
        time.sleep(60)  # a third party's probe stuck on something (before, certlab waited with it)
        return None

    monkeypatch.setattr(containment, "PROBE_DEADLINE_S", 0.3)
    beats: list[int] = []

    def heartbeat(_signum: int, _frame: object) -> None:  # as certify's runs, on a SIGALRM interval
        beats.append(1)

    previous = signal.signal(signal.SIGALRM, heartbeat)
    signal.setitimer(signal.ITIMER_REAL, 30.0, 30.0)
    try:
        warnings: list[str] = []
        started = time.monotonic()
        chosen = choose_containment(
            Installed(attrs.evolve(passthrough("cell", True, 1), probe=hanging)), "auto", [], warnings.append
        )
        elapsed = time.monotonic() - started
        left, interval = signal.getitimer(signal.ITIMER_REAL)
        handler = signal.getsignal(signal.SIGALRM)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert not chosen.contained and elapsed < 5.0
    assert len(warnings) == 1 and "cell's probe did not answer within 0.3 s" in warnings[0]
    assert 25.0 < left <= 30.0 and interval == 30.0 and handler is heartbeat and beats == []


def test_a_sandbox_record_with_an_order_that_is_no_integer_is_refused_when_made() -> None:
    with pytest.raises(TypeError):
        attrs.evolve(passthrough("cell", True, None), auto_order="1")


def test_none_is_a_name_like_any_sandbox_and_without_its_plugin_says_what_to_install() -> None:
    # Before, "none" was the kernel's own word, valid with no sandbox installed at all.
    with pytest.raises(UsageError) as refused:
        choose_containment(NoSandboxes(), "none", [], lambda _l: None)
    assert (
        refused.value.message == "--sandbox none: the sandbox 'none' is not installed; pip install certlab-sandbox-none"
    )
    # auto needs no none record: without a working sandbox it still runs uncontained, with its one warning line.
    warnings: list[str] = []
    assert not choose_containment(NoSandboxes(), "auto", [], warnings.append).contained and len(warnings) == 1


def test_only_the_sandbox_named_none_does_not_contain_and_auto_never_takes_it() -> None:
    with pytest.raises(ValueError, match="only the sandbox named 'none' does not contain"):
        attrs.evolve(passthrough("cell", True, None), contains=False)
    with pytest.raises(ValueError, match="only the sandbox named 'none' does not contain"):
        passthrough("none", True, None)  # a record named none that would contain: the evidence would lie
    with pytest.raises(ValueError, match="takes no part in auto"):
        Sandbox(
            name="none",
            description="x",
            probe=lambda: None,
            launch=lambda r: SandboxLaunch(argv=r.argv, env=r.env),
            python=lambda: sys.executable,
            auto_order=1,
            contains=False,
        )
