"""Replay a reproducer: its agent against the recorded events, no live tool.

The n-th call the agent makes must be the n-th recorded event (same kind, name and
arguments as JSON); it then receives the recorded result, or the recorded error is raised.
Any other call, or a recording not fully consumed, makes the replay invalid (exit 3): the
agent did not take the recorded path, so the recording cannot say what would have happened.
Otherwise the agent made exactly the recorded calls, so the world ended in the recorded
state; the replay reproduces the trial when the agent also ended the same way (the same
outcome and failure mode, and the same exception for a crash), exit 0, else exit 1.

``--live`` instead re-runs the trial for real through the kernel's services (the same world,
seed and faults, optionally with another agent): exit 0 when the recorded outcome and failure
mode come back, 1 when they do not (for a failure's reproducer, 1 means the agent now copes).

Either way replay runs the code the reproducer holds (its included files): only in a fresh
child process, with the files written inside that child's own temp folder (never through a
link, never at an absolute or ``..`` path). Both run it in the sandbox ``--sandbox`` chooses
(:func:`reproducer_code_containment`; by default bwrap where it works, else uncontained with
one warning line), and say which containment it was.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import random
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attrs import frozen

from certlab_core.plugin.errors import EXIT_ERROR, EXIT_MISMATCH, EXIT_OK
from certlab_core.plugin.types.sandbox import Containment
from certlab_core.sdk.canonical import canonical_json
from certlab_core.sdk.forking import ForkedCallError, call_in_fork
from certlab_core.sdk.trees import make_temp_folder, remove_made, temporary_folder
from certlab_core.sdk.workcopy import write_inside
from certlab_diagnosis.bundle import edited_files, manifest_from_slice, module_paths
from certlab_diagnosis.diff import describe_call

if TYPE_CHECKING:
    from certlab_core.plugin import Services

KILL_GRACE_S = 5.0


@frozen
class ReplayResult:
    """What a replay found: ``reproduced``, ``not-reproduced`` or ``invalid``, its exit code and the lines to print."""

    status: str
    exit_code: int
    lines: tuple[str, ...]


class ReplayDeparture(BaseException):
    """The agent made a call that is not the next recorded one (a BaseException: the agent cannot swallow it)."""


class _Deadline(BaseException):
    """The replay ran past the trial's seconds budget."""


class RecordedBoundary:
    """Answers an agent's calls from a recording, in order, and notes the first departure from it.

    :meth:`answer` is what the services' ``replay_tools`` asks for each call: the recorded event,
    whose result the agent gets (or whose error it is raised).
    """

    def __init__(self, events: Sequence[Mapping[str, Any]]) -> None:
        self.events = list(events)
        self.position = 0
        self.departure: str | None = None

    def answer(self, kind: str, name: str, args: Any) -> Mapping[str, Any]:
        wanted = {"kind": kind, "name": name, "args": args}
        if self.position >= len(self.events):
            self.departure = (
                f"call #{self.position} {describe_call(wanted)}: the recording ended after {len(self.events)} event(s)"
            )
            raise ReplayDeparture(self.departure)
        event = self.events[self.position]
        same_call = (event.get("kind"), event.get("name")) == (kind, name)
        if not same_call or canonical_json(event.get("args")) != canonical_json(args):
            self.departure = (
                f"call #{self.position} {describe_call(wanted)}: the recording has {describe_call(event)} there"
            )
            raise ReplayDeparture(self.departure)
        self.position += 1
        return event


# --------------------------------------------------------------------------- loading the included files


def load_included(files: Sequence[Mapping[str, Any]], folder: Path) -> None:
    """Write the included files under ``folder`` and load each as its module, replacing any installed version.

    This runs the code the reproducer holds (replay is always in a child process). Each file is
    written only inside ``folder``, with no-follow semantics: a path that is absolute, holds
    ``..`` or passes through a link is refused (``read_bundle`` refuses it first, as tampered).
    """
    for entry in files:
        relpath = str(entry["path"])
        if relpath not in module_paths(str(entry["module"])):
            raise ImportError(f"the included path {relpath!r} is not that of the module {entry['module']!r}")
        write_inside(folder, relpath, str(entry["text"]).encode("utf-8"))
        path = folder / relpath
        name = str(entry["module"])
        parent, _, leaf = name.rpartition(".")
        if parent:
            importlib.import_module(parent)
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {entry['path']} as {name}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        if parent:
            setattr(sys.modules[parent], leaf, module)


def _on_deadline(_signum: int, _frame: Any) -> None:
    raise _Deadline()


def _replay_child(bundle: Mapping[str, Any], services: Services) -> dict[str, Any]:
    """In a child: load the included files, run the agent against the recording, and say how it ended."""
    from certlab_core.plugin import exceptions

    piece = bundle["manifest"]
    trial = bundle["trial"]
    recorded = RecordedBoundary(trial.get("events") or ())
    ending: dict[str, Any] = {"status": "completed", "exit_code": None, "detail": "", "uncaught_tool_error": False}
    with temporary_folder("certlab-replay-") as made:
        try:
            load_included(bundle["files"], made.as_path)
            agent = services.load_agent(bundle["agent"]["reference"], piece.get("descriptor_dir"))
        except Exception as error:
            return {"load_error": f"{type(error).__name__}: {error}"}
        tools = services.replay_tools(recorded.answer, tuple(piece["task"].get("tools") or ()))
        seconds = float(piece["budgets"].get("seconds") or 60.0)
        previous = signal.signal(signal.SIGALRM, _on_deadline)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            agent(json.loads(json.dumps(bundle["agent"]["task"])), tools, random.Random(bundle["agent"]["rng_seed"]))
        except ReplayDeparture:
            pass
        except _Deadline:
            ending.update(status="timeout", detail=f"the seconds budget ({seconds:g} s) ran out")
        except exceptions.BudgetExceeded as error:
            ending.update(status="budget", detail=f"{type(error).__name__}: {error}")
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
            ending.update(status="exited", exit_code=code, detail=f"the agent called sys.exit({done.code!r})")
        except exceptions.ToolError as error:
            ending.update(status="crashed", detail=f"{type(error).__name__}: {error}", uncaught_tool_error=True)
        except BaseException as error:
            ending.update(status="crashed", detail=f"{type(error).__name__}: {error}")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    return {
        "ending": ending,
        "departure": recorded.departure,
        "consumed": recorded.position,
        "recorded": len(recorded.events),
    }


def _budget_exceeded(trial: Mapping[str, Any], status: str) -> str | None:
    """Which budget ran out in the replay: the seconds on a timeout, else the recorded one if a recorded call hit it."""
    if status == "timeout":
        return "seconds"
    hit = any((e.get("error") or {}).get("type") == "BudgetExceeded" for e in trial.get("events") or ())
    return str(trial.get("budget_exceeded") or "tool_calls") if hit else None


def _exception_type(detail: str) -> str:
    return detail.partition(":")[0].strip()


def reproducer_code_containment(services: Services, sandbox: str = "auto") -> Containment:
    """The containment the reproducer's code runs under (``--sandbox``); see ``Services.evidence_containment``.

    Inside it the reproducer's agent sees a read-only system, writes only in its own temp
    folder, has no network and its processes die with it; every installed family's clean
    tree and held-out cases stay hidden. certlab's own installation stays visible: the
    replay process is certlab's, running the reproducer's agent against the recording.
    """
    return services.evidence_containment(sandbox, installation_visible=True)


def _contained_replay(
    bundle: Mapping[str, Any],
    services: Services,
    containment: Containment,
    timeout_s: float,
    live: bool = False,
    agent: str | None = None,
) -> dict[str, Any]:
    """:func:`_replay_child` (or, ``live``, :func:`_live_child`) in a new interpreter inside ``containment``.

    Its own temp folder is the one folder it may write. A live re-run is also shown the
    experiment's folder read-only (the world and agent references resolve against it). The
    new interpreter is the services' ``child_argv``, which runs :func:`contained_main` with
    services of its own.
    """
    import os

    from certlab_core.sdk.command import run_contained
    from certlab_core.sdk.containment import installation_paths
    from certlab_core.sdk.forking import ChildFailure

    made = make_temp_folder("certlab-replay-contained-")
    folder = made.as_path
    try:
        (folder / "bundle.json").write_text(json.dumps(bundle), encoding="utf-8")
        (folder / "job.json").write_text(json.dumps({"live": live, "agent": agent}), encoding="utf-8")
        shown = []
        descriptor_dir = bundle["manifest"].get("descriptor_dir")
        if live and isinstance(descriptor_dir, str) and os.path.isdir(descriptor_dir):
            shown.append(descriptor_dir)
        # Not -I: the reproducer's agent may import modules from the folders PYTHONPATH names, as it did when it
        # ran; those folders are shown read-only (an answer key inside one stays hidden). child_argv: -s, no user site.
        env = {k: v for k, v in os.environ.items() if not k.startswith("CERTLAB_")}
        search = tuple(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.isdir(p))
        # The sandbox drops PYTHONPATH from the environment; the child puts these on sys.path.
        argv = services.child_argv("certlab_diagnosis.replay:contained_main", str(folder), *search)
        env["TMPDIR"] = str(folder)
        with (folder / "replay.log").open("wb") as log:
            ran = run_contained(
                argv,
                cwd=str(folder),
                env=env,
                timeout_s=timeout_s,
                stdout=log,
                stderr=log,
                containment=containment,
                readable=(*installation_paths(), *search, *shown),  # certlab itself, wherever it lives
            )
        try:
            found = json.loads((folder / "result.json").read_text(encoding="utf-8"))
            if not isinstance(found, dict):
                raise ValueError("not an object")
        except (OSError, ValueError):
            how = ran.detail or f"exit status {ran.exit_code}"
            with contextlib.suppress(OSError):
                tail = (folder / "replay.log").read_bytes()[-4096:].decode("utf-8", "replace").strip().splitlines()
                how += f": {tail[-1]}" if tail else ""
            raise ForkedCallError(
                ChildFailure("died", f"the contained replay process did not report ({how})")
            ) from None
        return found
    finally:
        remove_made(made)  # iteratively, whatever the replayed code left there


def contained_main(services: Services, folder: str, *search: str) -> int:
    """In the sandbox: replay ``folder/bundle.json`` (or re-run it live, as ``job.json`` says) into ``result.json``.

    ``search`` are the folders PYTHONPATH named where the replay was asked for (read-only here).
    """
    sys.path.extend(search)
    bundle = json.loads(Path(folder, "bundle.json").read_text(encoding="utf-8"))
    job = json.loads(Path(folder, "job.json").read_text(encoding="utf-8"))
    found = _live_child(bundle, job.get("agent"), services) if job.get("live") else _replay_child(bundle, services)
    Path(folder, "result.json").write_text(json.dumps(found), encoding="utf-8")
    return 0


def replay(bundle: Mapping[str, Any], services: Services, sandbox: str = "auto") -> ReplayResult:
    """Replay the reproducer's agent against its recording (in a fresh process, contained as ``sandbox`` says)."""
    trial = bundle["trial"]
    containment = reproducer_code_containment(services, sandbox)
    lines = [
        f"replay {trial['id']} of {bundle['experiment']} (recorded: {_outcome(trial)})",
        services.containment_line(containment, "this reproducer"),
    ]
    edited = edited_files(bundle)
    if edited:
        lines.append(f"included files edited since bundling: {', '.join(edited)}")
    seconds = float(bundle["manifest"]["budgets"].get("seconds") or 60.0)
    try:
        if containment.contained:
            found = _contained_replay(bundle, services, containment, seconds + KILL_GRACE_S)
        else:
            found = call_in_fork(_replay_child, bundle, services, timeout=seconds + KILL_GRACE_S)
    except ForkedCallError as error:
        lines.append(f"invalid: the replay process failed ({error.failure.summary})")
        return ReplayResult("invalid", EXIT_ERROR, tuple(lines))
    if "load_error" in found:
        lines.append(f"invalid: the included agent does not load ({found['load_error']})")
        return ReplayResult("invalid", EXIT_ERROR, tuple(lines))
    if found["departure"] is not None:
        lines.append(f"invalid: the agent left the recording at {found['departure']}")
        return ReplayResult("invalid", EXIT_ERROR, tuple(lines))
    if found["consumed"] < found["recorded"]:
        lines.append(
            f"invalid: the agent stopped after {found['consumed']} of {found['recorded']} recorded events "
            f"({found['ending']['status']}); the recording was not fully consumed"
        )
        return ReplayResult("invalid", EXIT_ERROR, tuple(lines))
    lines.append(f"the agent made exactly the {found['recorded']} recorded calls, in order")
    ending = found["ending"]
    manifest = manifest_from_slice(bundle["manifest"])
    outcome = {
        "agent": {"status": ending["status"], "exit_code": ending["exit_code"], "detail": ending["detail"]},
        "error": None,
        "budget_exceeded": _budget_exceeded(trial, ending["status"]),
        "uncaught_tool_error": ending["uncaught_tool_error"],
    }
    # The same calls leave the world in the same state, so the oracle's recorded verdict stands.
    replayed, mode, problem = services.judge(manifest, outcome, trial.get("oracle"))
    if replayed == "error" and trial.get("oracle") is None:
        # The recorded trial never reached the oracle, so no recorded verdict covers this ending.
        replayed, mode = "unjudged", None
        lines.append("the recorded trial was never judged by the oracle; with no live world, this ending is not judged")
    elif replayed == "error":
        lines.append(f"the replayed ending is an infrastructure error: {problem}")
    lines.append(f"replayed: agent {ending['status']}" + (f" ({ending['detail']})" if ending["detail"] else ""))
    same = (replayed, mode) == (trial.get("outcome"), trial.get("failure_mode"))
    recorded_agent = trial.get("agent") or {}
    if same and ending["status"] == "crashed":
        same = _exception_type(ending["detail"]) == _exception_type(str(recorded_agent.get("detail", "")))
    if same:
        lines.append(f"reproduced: {_outcome({'outcome': replayed, 'failure_mode': mode})}")
        return ReplayResult("reproduced", EXIT_OK, tuple(lines))
    lines.append(
        f"not reproduced: recorded {_outcome(trial)} (agent {recorded_agent.get('status')}), "
        f"replayed {_outcome({'outcome': replayed, 'failure_mode': mode})} (agent {ending['status']})"
    )
    return ReplayResult("not-reproduced", EXIT_MISMATCH, tuple(lines))


def _outcome(trial: Mapping[str, Any]) -> str:
    if trial.get("outcome") == "unjudged":
        return "an ending the recording cannot judge"
    if trial.get("outcome") == "failure":
        return f"failure {trial.get('failure_mode')}"
    return str(trial.get("outcome"))


# --------------------------------------------------------------------------- live


def _live_child(bundle: Mapping[str, Any], agent: str | None, services: Services) -> dict[str, Any]:
    with temporary_folder("certlab-replay-") as made:
        load_included(bundle["files"], made.as_path)
        manifest = manifest_from_slice(bundle["manifest"], {"agent": agent} if agent else None)
        return services.rerun_trial(manifest, bundle["trial"]["id"])


LIVE_TIMEOUT_S = 600.0


def replay_live(
    bundle: Mapping[str, Any], services: Services, agent: str | None = None, sandbox: str = "auto"
) -> ReplayResult:
    """Re-run the reproducer's trial for real (same world, seed and faults), with its agent or ``agent``.

    The whole re-run (world, agent, faults and oracle, all of them the reproducer's code or
    resolved beside it) runs in a new interpreter inside the sandbox ``sandbox`` chooses.
    """
    from certlab_diagnosis.diff import same_recording

    trial = bundle["trial"]
    who = agent or bundle["agent"]["reference"]
    containment = reproducer_code_containment(services, sandbox)
    lines = [
        f"live re-run of {trial['id']} of {bundle['experiment']} with {who} (recorded: {_outcome(trial)})",
        services.containment_line(containment, "this reproducer"),
    ]
    started = time.monotonic()
    try:
        if containment.contained:
            line = _contained_replay(bundle, services, containment, LIVE_TIMEOUT_S, live=True, agent=agent)
        else:
            line = call_in_fork(_live_child, bundle, agent, services, timeout=LIVE_TIMEOUT_S)
    except ForkedCallError as error:
        lines.append(f"invalid: the live re-run failed ({error.failure.summary})")
        return ReplayResult("invalid", EXIT_ERROR, tuple(lines))
    if line.get("outcome") == "error":
        lines.append(f"invalid: the re-run hit an infrastructure error ({line.get('error')})")
        return ReplayResult("invalid", EXIT_ERROR, tuple(lines))
    same_events = same_recording(line.get("events") or (), trial.get("events") or ())
    lines.append(
        f"re-ran in {time.monotonic() - started:.2f} s: {_outcome(line)}; "
        + ("the same boundary events as recorded" if same_events else "boundary events differ from the recording")
    )
    if (line.get("outcome"), line.get("failure_mode")) == (trial.get("outcome"), trial.get("failure_mode")):
        lines.append(f"reproduced: {_outcome(line)}")
        return ReplayResult("reproduced", EXIT_OK, tuple(lines))
    fixed = trial.get("outcome") == "failure" and line.get("outcome") == "success"
    lines.append(
        f"not reproduced: {_outcome(line)} instead of {_outcome(trial)}"
        + (f" ({who} copes with the recorded conditions)" if fixed else "")
    )
    return ReplayResult("not-reproduced", EXIT_MISMATCH, tuple(lines))


# --------------------------------------------------------------------------- a real agent's certified trial


def replay_certified_trial(
    folder: Path, trial_id: str, services: Services, sandbox: str = "auto", hidden: Sequence[str] = ()
) -> ReplayResult:
    """Re-run one trial of a certification offline: the same adapter in a fresh work copy, every model call answered
    from the trial's recording by the model boundary, no upstream at all; then grade what it left.

    The agent runs contained as a certification runs it (``--sandbox``: bwrap where it works
    by default): the installed families' clean trees and held-out cases, the certification
    folder (which holds the trial's own recorded changes) and ``hidden`` (a user task's
    experiment directory) are out of its reach. Invalid (exit 3) when the trial holds no
    model recording or the agent asked something the recording does not hold (it left the
    recorded path); reproduced (exit 0) when the recorded verdict and failure mode come
    back, else not reproduced (exit 1).
    """
    bundle = services.open_bundle(folder)
    trial = bundle.trial(trial_id)
    recorded = f"{trial.get('verdict')} ({trial.get('failure_mode') or 'no failure'})"
    lines = [f"replay {trial_id} of {folder} offline (recorded: {recorded})"]
    events = [e for e in ((trial.get("model") or {}).get("events") or ()) if isinstance(e, Mapping)]
    if not events:
        lines.append("invalid: the trial holds no model recording (its agent ran without the model boundary)")
        return ReplayResult("invalid", EXIT_ERROR, tuple(lines))
    replayed = services.replay_certified(bundle, trial_id, sandbox, hidden)
    lines.append(replayed.containment)
    if replayed.failure is not None:
        lines.append(f"invalid: the replay process failed ({replayed.failure})")
        return ReplayResult("invalid", EXIT_ERROR, tuple(lines))
    if replayed.departure:
        lines.append(f"invalid: the agent left the recording at {replayed.departure}")
        return ReplayResult("invalid", EXIT_ERROR, tuple(lines))
    if replayed.served < len(events):
        lines.append(f"invalid: the agent stopped after {replayed.served} of {len(events)} recorded model calls")
        return ReplayResult("invalid", EXIT_ERROR, tuple(lines))
    again = f"{replayed.verdict} ({replayed.failure_mode or 'no failure'})"
    lines.append(f"the agent made exactly the {len(events)} recorded model calls, answered from the recording")
    if (replayed.verdict, replayed.failure_mode) == (trial.get("verdict"), trial.get("failure_mode")):
        lines.append(f"reproduced: {again}")
        return ReplayResult("reproduced", EXIT_OK, tuple(lines))
    lines.append(f"not reproduced: recorded {recorded}, replayed {again}")
    return ReplayResult("not-reproduced", EXIT_MISMATCH, tuple(lines))
