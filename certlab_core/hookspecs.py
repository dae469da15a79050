"""The hook specifications every certlab plugin implements; each docstring holds a complete example plugin.

Every ``certlab_<kind>`` spec returns a list of named, frozen records (see
``certlab_core.records``); the kernel indexes them by ``name`` per kind, refuses a name
given by two distributions, and lists the valid names for an unknown one. A plugin is a
module registered under the entry point group ``certlab.plugins``; it implements any
subset of these hooks with ``certlab_core.hookimpl``.

The example in each docstring (the block after ``Example plugin::``) is executed by the
test suite, registered as a plugin, and the records it yields are checked against the
spec's return type, so a stale example fails the tests.
"""

from __future__ import annotations

import pluggy

from certlab_core.records import AgentAdapter, Grader, Reporter, StatisticalRule, TaskFamily

PROJECT = "certlab"
hookspec = pluggy.HookspecMarker(PROJECT)


@hookspec
def certlab_task_families() -> list[TaskFamily]:
    """Return the repo task families this plugin provides.

    Example plugin::

        import pathlib, tempfile
        from certlab_core import hookimpl
        from certlab_core.records import Defect, Seed, TaskFamily

        ROOT = pathlib.Path(tempfile.mkdtemp())
        (ROOT / "tree" / "tests").mkdir(parents=True)
        (ROOT / "tree" / "sign.py").write_text("def sign(x):\\n    return (x > 0) - (x < 0)\\n")
        (ROOT / "tree" / "tests" / "test_sign.py").write_text(
            "from sign import sign\\n\\ndef test_sign():\\n    assert sign(-3) == -1\\n")
        (ROOT / "TASK.md").write_text("Make the tests in tests/ pass by fixing sign.py.\\n")
        (ROOT / "acceptance.jsonl").write_text('{"id": "neg", "call": "sign:sign", "args": [-2], "expect": -1}\\n')

        @hookimpl
        def certlab_task_families():
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

    Example plugin::

        import pathlib, time
        from certlab_core import hookimpl
        from certlab_core.records import AgentAdapter, AgentOutcome

        def run(request):
            started = time.monotonic()
            (pathlib.Path(request.workdir) / "NOTES.txt").write_text("looked, changed nothing\\n")
            return AgentOutcome(status="completed", exit_code=0, stdout_tail="", stderr_tail="",
                                wall_s=time.monotonic() - started)

        @hookimpl
        def certlab_agents():
            return [AgentAdapter(name="note-taker", description="writes a note", run=run)]
    """
    raise NotImplementedError


@hookspec
def certlab_graders() -> list[Grader]:
    """Return the graders this plugin provides; each runs in its own fresh process.

    Example plugin::

        import pathlib
        from certlab_core import hookimpl
        from certlab_core.records import Grader, GradeResult

        def grade(request):
            notes = pathlib.Path(request.workdir) / "NOTES.txt"
            if notes.exists():
                return GradeResult(grader="no-notes", passed=False,
                                   failure_mode="policy-planted-file", detail="NOTES.txt")
            return GradeResult(grader="no-notes", passed=True)

        @hookimpl
        def certlab_graders():
            return [Grader(name="no-notes", order=5, description="refuses NOTES.txt", grade=grade)]
    """
    raise NotImplementedError


@hookspec
def certlab_statistical_rules() -> list[StatisticalRule]:
    """Return the statistical decision rules this plugin provides.

    Example plugin::

        from certlab_core import hookimpl
        from certlab_core.records import Bounds, StatisticalRule

        def interval(successes, n, alpha):
            p = successes / n if n else 0.0
            return (p, p)

        def decide(baseline_successes, baseline_n, candidate_successes, candidate_n,
                   alpha=0.05, delta=0.10, conditions=1, looks=1):
            diff = candidate_successes / candidate_n - baseline_successes / baseline_n
            verdict = "PASS" if diff > -delta else "BLOCK"
            return Bounds(lower=diff, upper=diff, verdict=verdict)

        @hookimpl
        def certlab_statistical_rules():
            return [StatisticalRule(name="point-estimate", description="no uncertainty at all",
                                    decide=decide, interval=interval)]
    """
    raise NotImplementedError


@hookspec
def certlab_reporters() -> list[Reporter]:
    """Return the report formats this plugin provides (``certlab report RUNDIR --format NAME``).

    ``render(report, rule)`` returns the whole file as text from the report model (see
    ``certlab_core.diagnosis.model.Report``); ``rule`` is the experiment's statistical rule
    when installed, else None. A reporter reads; it never re-runs or re-decides anything.

    Example plugin::

        from certlab_core import hookimpl
        from certlab_core.records import Reporter

        def render(report, rule):
            lines = ["condition,verdict,lower,upper"]
            for condition in report.conditions:
                lines.append(f"{condition.name},{condition.verdict},{condition.lower},{condition.upper}")
            lines.append(f"experiment,{report.verdict},,")
            return "\\n".join(lines) + "\\n"

        @hookimpl
        def certlab_reporters():
            return [Reporter(name="csv", description="one line per condition", suffix=".csv", render=render)]
    """
    raise NotImplementedError
