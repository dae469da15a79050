"""The hook specifications; each docstring holds a complete example plugin.

Every ``certlab_<kind>`` spec returns a list of named, frozen records (see
``certlab_core.plugin.types``); the kernel indexes them by ``name`` per kind, refuses a name
given by two distributions, and lists the valid names for an unknown one. A plugin is a
module registered under the entry point group ``certlab.plugins``; it implements any
subset of these hooks with ``certlab_core.hookimpl``.

The example in each docstring (the block after ``Example plugin::``) is executed by the
test suite, registered as a plugin, and the records it yields are checked against the
spec's return type, so a stale example fails the tests.
"""

from __future__ import annotations

import pluggy

from certlab_core.plugin.types.agent import AgentAdapter
from certlab_core.plugin.types.command import Command
from certlab_core.plugin.types.evidence_signer import EvidenceSigner
from certlab_core.plugin.types.executor import Executor
from certlab_core.plugin.types.family import TaskFamily
from certlab_core.plugin.types.fault import Fault
from certlab_core.plugin.types.grader import Grader
from certlab_core.plugin.types.held_out import HeldOutAcceptance
from certlab_core.plugin.types.instrument_proof import InstrumentProof
from certlab_core.plugin.types.model_boundary import ModelBoundary
from certlab_core.plugin.types.reporter import Reporter
from certlab_core.plugin.types.rule import StatisticalRule
from certlab_core.plugin.types.sandbox import Sandbox
from certlab_core.plugin.types.task_source import TaskSource
from certlab_core.plugin.types.tool_world import ToolWorld

PROJECT = "certlab"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)
"""Marks a plugin's function as the implementation of the certlab hook of the same name."""


@hookspec
def certlab_task_families() -> list[TaskFamily]:
    """Return the repo task families this plugin provides.

    Example plugin::

        import pathlib, tempfile
        from certlab_core.plugin import Defect, Seed, TaskFamily, hookimpl

        ROOT = pathlib.Path(tempfile.mkdtemp())
        (ROOT / "tree" / "tests").mkdir(parents=True)
        (ROOT / "tree" / "sign.py").write_text("def sign(x):\\n    return (x > 0) - (x < 0)\\n")
        (ROOT / "tree" / "tests" / "test_sign.py").write_text(
            "from sign import sign\\n\\ndef test_sign():\\n    assert sign(-3) == -1\\n")
        (ROOT / "TASK.md").write_text("Make the tests in tests/ pass by fixing sign.py.\\n")
        (ROOT / "acceptance.jsonl").write_text('{"id": "neg", "call": "sign:sign", "args": [-2], "expect": -1}\\n')

        @hookimpl
        def certlab_task_families() -> list[TaskFamily]:
            return [TaskFamily(
                name="sign", version="1.0", description="one-function example",
                tree_dir=str(ROOT / "tree"), prompt_file=str(ROOT / "TASK.md"),
                cases_file=str(ROOT / "acceptance.jsonl"),
                allowed_paths=["sign.py"], test_paths=["tests"], module_names=["sign"],
                defects=[Defect(id="inverted", defect_class="inverted-condition",
                                description="signs swapped",
                                seeds=[Seed("sign.py", "(x > 0) - (x < 0)", "(x < 0) - (x > 0)")])],
            )]
    """
    raise NotImplementedError


@hookspec
def certlab_agents() -> list[AgentAdapter]:
    """Return the agents (adapters) this plugin can run.

    ``run`` receives an ``AgentRequest`` (work directory, prompt, timeout, environment)
    and returns an ``AgentOutcome``; the agent's own words and exit code decide nothing.
    An adapter for a command-line agent hands its argument vector to the SDK's
    ``run_command``, which keeps the timeout, the process session, the leftover processes
    and the output tails. An adapter that raises, or returns ``unavailable``, is an
    infrastructure error, never a failed fix; its ``detail`` reaches the evidence.
    ``run`` executes in a forked child of the trial, in a process group of its own, held
    to the agent timeout plus a few seconds' grace: past them the group is killed, the
    trial is ``agent-timeout``, and every process it started is gone. A ``run`` that raises,
    dies, or returns anything but an ``AgentOutcome`` makes the trial ``agent-unavailable``,
    naming the adapter, its plugin and its distribution; the bundle is still written.

    Under the default sandbox the program sees an allow-list (docs/trust-model.md): the
    system, its own runtime (the sandbox resolves the program's interpreter, venv,
    ``node_modules`` root or install prefix by itself), the work copy and a private HOME.
    Declare the rest: ``run_command(request, argv, readable=[...])`` for files or folders it
    only reads (a configuration, a data folder), ``writable=[...]`` for folders the adapter
    made for the run (a fresh HOME, made with ``tempfile.mkdtemp``, is the agent's HOME only
    when it is given here). ``AgentAdapter(environment=("NAME", ...))`` names the harness's
    variables the agent gets beyond ``PATH``, locale, ``TERM`` and ``TZ``, and
    ``programs=lambda args: [...]`` the programs ``run`` starts, which certify and run check
    inside the containment before the first trial (one the sandbox hides makes every trial
    ``agent-unavailable``, with one line naming it). ``AdapterConformance`` runs its checks
    inside the default sandbox.

    Example plugin::

        import shutil
        from certlab_core.plugin import AgentAdapter, AgentOutcome, AgentRequest, hookimpl
        from certlab_core.sdk.command import run_command

        def run(request: AgentRequest) -> AgentOutcome:
            if shutil.which("sed", path=request.env.get("PATH")) is None:
                return AgentOutcome(status="unavailable", detail="sed is not on PATH")
            # a one-line "agent": flips the first strict comparison it finds in every Python file
            return run_command(request, ["/bin/sh", "-c", "sed -i '0,/ < /s// <= /' *.py"])

        @hookimpl
        def certlab_agents() -> list[AgentAdapter]:
            return [AgentAdapter(name="flipper", description="a sed one-liner as an agent", run=run,
                                 programs=lambda args: ["sed"])]
    """
    raise NotImplementedError


@hookspec
def certlab_graders() -> list[Grader]:
    """Return the graders this plugin provides; each runs in its own fresh process.

    Example plugin::

        import pathlib
        from certlab_core.plugin import GradeRequest, GradeResult, Grader, hookimpl

        def grade(request: GradeRequest) -> GradeResult:
            notes = pathlib.Path(request.workdir) / "NOTES.txt"
            if notes.exists():
                return GradeResult(grader="no-notes", passed=False,
                                   failure_mode="policy-planted-file", detail="NOTES.txt")
            return GradeResult(grader="no-notes", passed=True)

        @hookimpl
        def certlab_graders() -> list[Grader]:
            return [Grader(name="no-notes", order=5, description="refuses NOTES.txt", grade=grade)]
    """
    raise NotImplementedError


@hookspec
def certlab_statistical_rules() -> list[StatisticalRule]:
    """Return the statistical decision rules this plugin provides.

    A rule with ``default=True`` is the one used where none is named (a descriptor without
    ``rule.name``, a contract's exact intervals, ``certlab stats`` without ``--rule``): the kernel
    names no rule itself, and only one installed rule may mark itself so (certlab-clopper-pearson's does).

    Example plugin::

        from certlab_core.plugin import Bounds, StatisticalRule, hookimpl
        from certlab_core.plugin.types.rule import GateVerdict

        def interval(successes: int, n: int, alpha: float) -> tuple[float, float]:
            p = successes / n if n else 0.0
            return (p, p)

        def decide(baseline_successes: int, baseline_n: int, candidate_successes: int, candidate_n: int,
                   alpha: float = 0.05, delta: float = 0.10, conditions: int = 1, looks: int = 1) -> Bounds:
            diff = candidate_successes / candidate_n - baseline_successes / baseline_n
            verdict: GateVerdict = "PASS" if diff > -delta else "BLOCK"
            return Bounds(lower=diff, upper=diff, verdict=verdict)

        @hookimpl
        def certlab_statistical_rules() -> list[StatisticalRule]:
            return [StatisticalRule(name="point-estimate", description="no uncertainty at all",
                                    decide=decide, interval=interval)]
    """
    raise NotImplementedError


@hookspec
def certlab_reporters() -> list[Reporter]:
    """Return the report formats this plugin provides (``certlab report RUNDIR --format NAME``).

    ``render(report, rule)`` returns the whole file as text from the report model, a
    ``certlab_core.plugin.Report`` (its parts, ``ConditionReport``, ``ArmSummary``, ``PassK``,
    ``FaultFiring``, ``FailureCluster``, ``ArmUsage``, ``InfraError`` and ``EarlierRun``, are
    exported there too); ``rule`` is the experiment's statistical rule when installed, else
    None. A reporter reads; it never re-runs or re-decides anything.

    Example plugin::

        from certlab_core.plugin import Report, Reporter, StatisticalRule, hookimpl

        def render(report: Report, rule: StatisticalRule | None) -> str:
            lines = ["condition,verdict,lower,upper"]
            for condition in report.conditions:
                lines.append(f"{condition.name},{condition.verdict},{condition.lower},{condition.upper}")
            lines.append(f"experiment,{report.verdict},,")
            return "\\n".join(lines) + "\\n"

        @hookimpl
        def certlab_reporters() -> list[Reporter]:
            return [Reporter(name="csv", description="one line per condition", suffix=".csv", render=render)]
    """
    raise NotImplementedError


@hookspec
def certlab_tool_worlds() -> list[ToolWorld]:
    """Return the tool worlds this plugin provides (tool tasks for the A/B gate).

    ``build(task_input, seed)`` makes a fresh world for one trial; the agent calls its tools
    through the recorded boundary; ``oracle(task, snapshot)`` judges the final state in its
    own process. A tool refuses with a boundary exception (``ToolRejected``, ``ToolUnavailable``...).

    Example plugin::

        from certlab_core.plugin import JsonObject, JsonValue, ToolRejected, ToolWorld, WorldInstance, hookimpl
        from certlab_core.plugin.types.tool_world import OracleVerdict

        def build(task_input: JsonObject, seed: int) -> WorldInstance:
            lights = {"hall": False}

            def switch(room: str, on: bool) -> JsonValue:
                if room not in lights:
                    raise ToolRejected(f"no room {room!r}")
                lights[room] = bool(on)
                return {"room": room, "on": lights[room]}

            return WorldInstance(task={"turn_on": "hall"}, tools={"switch": switch},
                                 snapshot=lambda: {"lights": dict(lights)})

        def oracle(task: JsonObject, snapshot: JsonValue) -> OracleVerdict:
            lights = snapshot.get("lights") if isinstance(snapshot, dict) else None
            on = isinstance(lights, dict) and lights.get(str(task["turn_on"])) is True
            return OracleVerdict(passed=on, detail="" if on else "the light is still off")

        @hookimpl
        def certlab_tool_worlds() -> list[ToolWorld]:
            return [ToolWorld(name="lights", description="one switch", tools=["switch"],
                              build=build, oracle=oracle)]
    """
    raise NotImplementedError


@hookspec
def certlab_faults() -> list[Fault]:
    """Return the faults this plugin can inject at the tool boundary.

    ``inject(context)`` is asked before each call its declaration matches and returns a
    ``FaultEffect`` (raise an error, delay, replace the result) or None when it does not fire;
    every trial records whether each declared fault fired.

    Example plugin::

        from certlab_core.plugin import Fault, FaultContext, FaultEffect, hookimpl

        def inject(context: FaultContext) -> FaultEffect | None:
            probability = context.params.get("probability", 0.5)
            if isinstance(probability, int | float) and context.rng.random() < probability:
                return FaultEffect(error="ToolUnavailable", message=f"{context.name} is down")
            return None

        @hookimpl
        def certlab_faults() -> list[Fault]:
            return [Fault(name="coin_flip_outage", description="a tool is down, at random",
                          inject=inject, target="tool")]
    """
    raise NotImplementedError


@hookspec
def certlab_executors() -> list[Executor]:
    """Return the executors this plugin provides: where trials run (``--executor NAME``).

    ``start(options)`` opens a session for one run or certification (``options`` holds
    ``--workers``, ``--scheduler`` and the distributions every worker must have, by version):
    it reaches its machines and refuses in one line (``UsageError``) before the first trial.
    The kernel then submits units of ``Work`` while ``busy() < slots`` and collects them with
    ``wait()``. Each unit must run in a fresh process of its own: ``run_isolated(stage, arg,
    timeout, abandoned)`` does that where it is called (a zygote per stage; ``abandoned`` kills a
    unit nothing waits for), so an executor only moves units and results. A unit lost with its
    machine comes back as a ``WorkFailure`` of kind ``worker-lost``: the runner records it and runs it again.

    Example plugin::

        from collections.abc import Sequence
        from certlab_core.plugin import Executor, ExecutorOptions, Stage, Work, WorkDone, hookimpl
        from certlab_core.sdk.executor import run_isolated

        class OneAtATime:
            slots = 1

            def __init__(self) -> None:
                self.queue: list[Work] = []

            def busy(self) -> int:
                return len(self.queue)

            def prepare(self, stages: Sequence[Stage]) -> None:
                pass  # nothing to start ahead: run_isolated starts a zygote on first use

            def submit(self, work: Work) -> None:
                self.queue.append(work)

            def wait(self) -> list[WorkDone]:
                work = self.queue.pop(0)
                done = run_isolated(work.stage, work.arg, work.timeout_s)
                return [WorkDone(tag=work.tag, value=done.value, failure=done.failure)]

            def close(self) -> None:
                self.queue.clear()

        def start(options: ExecutorOptions) -> OneAtATime:
            return OneAtATime()

        @hookimpl
        def certlab_executors() -> list[Executor]:
            return [Executor(name="one-at-a-time", description="each unit in turn, in a fresh process", start=start)]
    """
    raise NotImplementedError


@hookspec
def certlab_sandboxes() -> list[Sandbox]:
    """Return the sandboxes this plugin provides: how an agent, and the code it wrote, are contained.

    ``probe()`` returns None when the sandbox works on this machine, else one line saying
    why not (``--sandbox auto`` then runs uncontained with a warning; ``--sandbox NAME``
    refuses). ``launch(request)`` gets a ``SandboxRequest`` (the program, the one writable
    work folder, the paths to hide, the limits, the host sockets to bind in) and returns a
    ``SandboxLaunch``: the argument vector and environment to start, a ``before_exec`` run
    in the child (limits), ``limits_hit(exit_code)`` naming the limits the run exceeded
    (the trial's ``agent-resource-limit``), and ``release()``. ``python()`` is the
    interpreter contained code gets: one with pytest and nothing of certlab. Optional:
    ``serve(workers)``, a context manager the kernel enters around a certification's trials,
    a coding run's trials and a regrade's gradings (warm resources the forked trials inherit:
    bwrap's slots, cgroups kept from start to start), and ``SandboxLaunch.handoff``, whose
    ``Handoff.spawn`` may start the program from another process than the supervising one (a
    process already inside its cgroups).

    Example plugin::

        import resource, signal, sys
        from certlab_core.plugin import Sandbox, SandboxLaunch, SandboxRequest, hookimpl
        from certlab_core.plugin.types.sandbox import ResourceLimit

        def probe() -> str | None:
            return None  # rlimits work everywhere; this example hides nothing

        def launch(request: SandboxRequest) -> SandboxLaunch:
            def before_exec() -> None:
                resource.setrlimit(resource.RLIMIT_CPU, (request.limits.cpu_s, request.limits.cpu_s))

            def limits_hit(exit_code: int | None) -> tuple[ResourceLimit, ...]:
                return ("cpu",) if exit_code in (-signal.SIGXCPU, 128 + signal.SIGXCPU) else ()

            return SandboxLaunch(argv=request.argv, env=request.env, before_exec=before_exec, limits_hit=limits_hit)

        @hookimpl
        def certlab_sandboxes() -> list[Sandbox]:
            return [Sandbox(name="cpu-only", description="a CPU limit alone (an example: it contains nothing)",
                            probe=probe, launch=launch, python=lambda: sys.executable)]
    """
    raise NotImplementedError


@hookspec
def certlab_model_boundaries() -> list[ModelBoundary]:
    """Return the model boundaries this plugin provides: what stands between an agent CLI and its model API.

    ``open(run)`` gets a ``ModelRun`` (the harness environment with the upstream and its
    real keys, the work copy, the seed, the condition's model faults, the budgets, a
    recording to replay) and returns a session: ``agent_env(env)`` points the agent's CLI at
    the boundary with a per-run token, ``recording()`` is what the trial's record keeps of
    every model call (``events``, ``faults``, ``counts``, and ``infra_error`` when the real
    upstream failed), ``close()`` ends it. The kernel uses the first one installed.

    Example plugin::

        from collections.abc import Mapping
        from typing import Any
        from certlab_core.plugin import ModelBoundary, ModelRun, hookimpl

        class Passthrough:
            def agent_env(self, env: Mapping[str, str]) -> dict[str, str]:
                return dict(env)  # the agent talks to its upstream directly: nothing recorded

            def recording(self) -> dict[str, Any]:
                return {"events": [], "faults": [], "counts": {"model_calls": 0}, "infra_error": None}

            def close(self) -> None:
                pass

        def open_session(run: ModelRun) -> Passthrough:
            return Passthrough()

        @hookimpl
        def certlab_model_boundaries() -> list[ModelBoundary]:
            return [ModelBoundary(name="passthrough", description="no boundary at all (an example)",
                                  open=open_session)]
    """
    raise NotImplementedError


@hookspec
def certlab_commands() -> list[Command]:
    """Return the ``certlab`` subcommands this plugin adds; ``register(app)`` adds one to the typer app.

    The kernel's own commands come the same way, from its built-in command plugin; a
    plugin's command may not reuse one of their names. Only the command a command line names
    is registered, so import what it needs inside ``register`` or the command itself.

    A command that works on run stores or certifications takes the kernel's ``Services`` as
    the second positional parameter of its register, ``register(app, services)``: the kernel
    reads the signature and passes them (open a store or a bundle, re-run or replay a trial,
    judge an ending, recompute a decision), and the command never imports the engines.

    Example plugin::

        from pathlib import Path
        import typer
        from certlab_core.plugin import Command, Services, hookimpl

        def register(app: typer.Typer) -> None:
            @app.command("hello", help="Say hello (an example command).")
            def hello(name: str = "world") -> None:
                print(f"hello, {name}")

        def register_verdict(app: typer.Typer, services: Services, /) -> None:
            @app.command("verdict", help="A trial's outcome and its run's verdict, recomputed (an example).")
            def verdict(rundir: Path, trial: str) -> None:
                store = services.open_store(rundir)
                decision = services.recompute_decision(store)
                print(f"{trial}: {store.trial(trial)['outcome']}; the run: {decision['verdict']}")

        @hookimpl
        def certlab_commands() -> list[Command]:
            return [Command(name="hello", description="say hello", register=register),
                    Command(name="verdict", description="a trial's outcome", register=register_verdict)]
    """
    raise NotImplementedError


@hookspec
def certlab_held_out() -> list[HeldOutAcceptance]:
    """Return held-out acceptance: the locks a certification and an A/B experiment score their held-out cases under.

    ``open(registry, families, task_dirs)`` stages every user task, locks its cases and those
    of every family, and returns the run's locks (``HeldOutRun``), which the kernel checks
    before every arm and after the last trial and records in the bundle;
    ``register_experiment_task`` and ``experiment_lock`` do the same for the user task of an
    A/B experiment, and ``check_lock`` checks the gate's lock before each arm. One plugin
    provides it (certlab-acceptance); without one, certify says that held-out cases are
    unscored and a task of the user's own cannot be run.

    Example plugin::

        import shutil, tempfile
        from collections.abc import Sequence
        from pathlib import Path
        from certlab_core.plugin import HeldOutAcceptance, JsonValue, TaskFamily, UsageError, hookimpl
        from certlab_core.plugin.types.grader import AcceptanceLock
        from certlab_core.plugin.types.held_out import HeldOutIndex

        class NoLocks:  # every family scored as it is, unlocked (an example, not a safe one)
            def __init__(self, families: Sequence[TaskFamily]) -> None:
                self.families, self.scratch = list(families), Path(tempfile.mkdtemp())
                self.locks: dict[str, AcceptanceLock] = {}
            def lock_for(self, name: str) -> AcceptanceLock | None: return None
            def check(self, moment: str) -> None: pass
            def family_facts(self, family: TaskFamily) -> dict[str, JsonValue] | None: return None
            def document(self) -> dict[str, JsonValue]: return {"locks": []}
            def recorded_predictions(self) -> list[dict[str, JsonValue]]: return []
            def close(self) -> None: shutil.rmtree(self.scratch, ignore_errors=True)

        def open_run(registry: HeldOutIndex, families: Sequence[TaskFamily], task_dirs: Sequence[str]) -> NoLocks:
            if task_dirs:
                raise UsageError("this example scores no task of your own")
            return NoLocks(families)

        @hookimpl
        def certlab_held_out() -> list[HeldOutAcceptance]:
            return [HeldOutAcceptance(name="unlocked", description="held-out cases scored without a lock",
                                      open=open_run, register_experiment_task=lambda registry, directory: None,
                                      experiment_lock=lambda name: None, check_lock=lambda lock, moment: None)]
    """
    raise NotImplementedError


@hookspec
def certlab_task_sources() -> list[TaskSource]:
    """Return the kinds of user task this plugin reads: an experiment directory staged as a family.

    certify's ``--task DIR``, regrade's ``--task DIR`` and the A/B gate's descriptor folder ask
    every source whether it ``recognises`` the folder; the one that does reads it with ``stage``
    (the issued tree built below a new folder) into a ``TaskFamily``, which held-out acceptance locks
    and certify proves and runs like an installed family. certlab-acceptance provides
    ``user-task`` (``certlab.yaml``, ``fixture/``, ``tests/``, ``cases/``); with no source
    installed, a ``--task`` folder is refused in one line naming it.

    Example plugin::

        import shutil
        from pathlib import Path
        from certlab_core.plugin import Defect, TaskFamily, TaskSource, hookimpl

        def recognises(directory: Path) -> bool:  # a folder holding tree/, TASK.md and acceptance.jsonl
            return (directory / "tree").is_dir() and (directory / "TASK.md").is_file()

        def stage(directory: Path, dest: Path) -> TaskFamily:
            shutil.copytree(directory / "tree", dest / "tree")
            return TaskFamily(
                name=directory.name.lower(), version="0", description="a folder of the user's own",
                tree_dir=str(dest / "tree"), prompt_file=str(directory / "TASK.md"),
                cases_file=str(directory / "acceptance.jsonl"), allowed_paths=["*.py"], test_paths=["tests"],
                module_names=["sign"], clean_tree=False,
                defects=[Defect(id="as-issued", defect_class="user-task", description="the tree as issued",
                                seeds=[])],
            )

        @hookimpl
        def certlab_task_sources() -> list[TaskSource]:
            return [TaskSource(name="folder", description="tree/ and TASK.md", recognises=recognises, stage=stage)]
    """
    raise NotImplementedError


@hookspec
def certlab_instrument_proofs() -> list[InstrumentProof]:
    """Return proofs of the instrument beyond the seeded defects, measured for every family with a clean tree.

    Certify calls ``measure`` for each family whose seeded defects are caught (``reuse``: an
    earlier measurement of the same inputs may stand) and records ``outcome.document`` under
    ``name`` in the family's ``instrument`` entry; its ``refusals`` refuse the certification.
    ``certlab prove --mutants`` prints ``lines`` and ``details``; ``regrade --mutants`` measures
    afresh and gives the recorded document to ``recheck``; ``FamilyConformance`` fails on each
    of ``shortfalls``. certlab-mutation provides ``mutation``; without it, certify records the
    mutation proof as not measured, as ``--no-mutants`` does.

    Example plugin::

        from collections.abc import Mapping
        from certlab_core.plugin import InstrumentProof, JsonValue, TaskFamily, hookimpl
        from certlab_core.plugin.types.instrument_proof import ProofOutcome, ProofRecheck, ProofRequest

        def measure(request: ProofRequest) -> ProofOutcome:
            tests = len(request.expected_tests)
            line = f"tests {request.family.name}: the clean tree passes {tests} tests"
            return ProofOutcome(document={"measured": True, "tests": tests}, lines=(line,),
                                shortfalls={} if tests else {"tests": "the suite collects no test"})

        def recheck(family: TaskFamily, recorded: Mapping[str, JsonValue], outcome: ProofOutcome) -> ProofRecheck:
            now = outcome.document.get("tests")
            line = f"tests {family.name}: recorded {recorded.get('tests')}, now {now}"
            return ProofRecheck(line, () if recorded.get("tests") == now else (line,))

        @hookimpl
        def certlab_instrument_proofs() -> list[InstrumentProof]:
            return [InstrumentProof(name="test-count", description="how many tests the clean tree passes",
                                    measure=measure, recheck=recheck,
                                    check_minimums=lambda minimum, minimum_visible: None,
                                    check_fixed_tree=lambda request: ([], []))]
    """
    raise NotImplementedError


@hookspec
def certlab_evidence_signers() -> list[EvidenceSigner]:
    """Return ways to sign evidence, for ``--sign-key`` of ``certify`` and ``run``.

    The kernel calls ``load_key`` once, before the first trial, refuses a key a trial could read,
    and calls ``sign_folder`` on the folder the run wrote, printing the line it returns. One
    signer may be installed at a time. certlab-signing provides ``dsse``.

    Example plugin::

        import hashlib
        from pathlib import Path
        from certlab_core.plugin import EvidenceSigner, UsageError, hookimpl

        class SecretKey:
            def __init__(self, path: Path) -> None:
                self.path = path.resolve()
                self.secret = path.read_bytes()

        def load_key(path: Path) -> SecretKey:
            if not path.is_file():
                raise UsageError(f"{path}: no key file there; give the file your key is in")
            return SecretKey(path)

        def sign_folder(folder: Path, key: SecretKey) -> str:
            files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "SEAL")
            digest = hashlib.sha256(key.secret)
            for file in files:
                digest.update(file.read_bytes())
            (folder / "SEAL").write_text(digest.hexdigest())
            return f"sealed: {folder / 'SEAL'} ({len(files)} files)"

        @hookimpl
        def certlab_evidence_signers() -> list[EvidenceSigner]:
            return [EvidenceSigner(name="seal", description="a keyed sha256 over every file",
                                   load_key=load_key, sign_folder=sign_folder)]
    """
    raise NotImplementedError
