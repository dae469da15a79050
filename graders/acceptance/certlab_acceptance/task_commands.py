"""``certlab task from-commit``, ``from-swebench``, ``from-commits``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import typer

from certlab_core.plugin import UsageError
from certlab_core.sdk import safe_io

SANDBOX_HELP = (
    "Run the checks' tests in the first sandbox that works (auto), the one named (bwrap), or none (network not cut)."
)
task_app = typer.Typer(help="Build tasks of your own from a repository's bug-fix commits or SWE-bench instances.")


@contextlib.contextmanager
def building(choice: str, *hidden: Path) -> Iterator[None]:
    """The checks' tests under the containment a trial's grading has: bwrap (no network) where it works."""
    from certlab_core.sdk.containment import use_containment
    from certlab_core.sdk.services import choose_containment

    containment = choose_containment(choice, [str(p) for p in hidden], lambda line: typer.echo(line, err=True))
    with use_containment(containment):
        yield


def _text_of(path: Path, what: str) -> str:
    return safe_io.read_capped_text(path, what, UsageError, f"{path}: no such file")


@task_app.command("from-commit")
def from_commit_command(
    repo: Path = typer.Argument(..., help="A local git repository (a clone)."),
    commit: str = typer.Argument(..., help="The bug-fix commit: its parent is the defect, its new tests the cases."),
    out: Path = typer.Option(..., "--out", help="A new (or empty) folder for the task."),
    prompt: Path | None = typer.Option(None, "--prompt", help="The prompt, used as it is (PROMPT.md)."),
    issue_text: Path | None = typer.Option(
        None, "--issue-text", help="The issue the fix closed: the prompt is built from it (default: the message)."
    ),
    sandbox: str = typer.Option("auto", "--sandbox", help=SANDBOX_HELP),
) -> None:
    """Build a task from one bug-fix commit: work copy at the parent, the fix's new tests held out."""
    from certlab_acceptance.from_commit import from_commit

    if prompt is not None and issue_text is not None:
        raise UsageError("give --prompt FILE or --issue-text FILE, not both")
    statement = _text_of(issue_text, "issue text") if issue_text is not None else None
    with building(sandbox, repo, out):
        built = from_commit(repo, commit, out, statement)
    if prompt is not None:
        (built.out / "PROMPT.md").write_text(_text_of(prompt, "prompt"), encoding="utf-8")
    _say_built(built)


def _say_built(built: object) -> None:
    from certlab_acceptance.from_commit import Built

    assert isinstance(built, Built)
    typer.echo(
        f"built {built.out}: task {built.name}, {len(built.fail_to_pass)} held-out test(s) (FAIL_TO_PASS), "
        f"{len(built.pass_to_pass)} visible (PASS_TO_PASS)"
    )
    seconds = dict(built.runs).get("environment")
    if seconds is not None:
        typer.echo(f"environment: the project's declared dependencies, in the task's own venv ({seconds:g} s)")
    typer.echo(f"next: certlab lock {built.out}, then certlab prove --task {built.out} --fixed {built.out / 'oracle'}")


@task_app.command("from-swebench")
def from_swebench_command(
    file: Path = typer.Argument(..., help="A JSONL file of SWE-bench-format instances."),
    repos: Path = typer.Option(..., "--repos", help="A folder of local clones, named owner__name or name."),
    out: Path = typer.Option(..., "--out", help="A new (or empty) folder; each instance's task goes below it."),
    sandbox: str = typer.Option("auto", "--sandbox", help=SANDBOX_HELP),
) -> None:
    """Build a task from each SWE-bench-format instance of a local file; the problem statement is the prompt."""
    from certlab_acceptance.from_commit import (
        NotQualified,
        check_writable,
        from_instance,
        read_instances,
        task_name_for,
    )

    instances = read_instances(file)
    check_writable(out)
    refused = 0
    for instance in instances:
        try:
            with building(sandbox, repos, out):
                _say_built(from_instance(instance, repos, out / task_name_for(str(instance["instance_id"]))))
        except NotQualified as refusal:
            refused += 1
            typer.echo(f"rejected {instance['instance_id']}: {refusal.message}", err=True)
    if refused:
        raise UsageError(f"{refused} of {len(instances)} instance(s) rejected")


@task_app.command("from-commits")
def from_commits_command(
    repo: Path = typer.Argument(..., help="A local git repository (a clone)."),
    since: str = typer.Option(..., "--since", help="Look at the commits after this one, up to HEAD."),
    out: Path = typer.Option(..., "--out", help="A folder; each qualifying commit's task goes below it."),
    sandbox: str = typer.Option("auto", "--sandbox", help=SANDBOX_HELP),
) -> None:
    """Propose every commit after --since that qualifies, build the ones that pass, list the rejected."""
    from certlab_acceptance.from_commit import from_commits

    with building(sandbox, repo, out):
        built, rejected = from_commits(repo, since, out, typer.echo)
    for commit, reason in rejected:
        typer.echo(f"rejected {commit[:12]}: {reason.removeprefix(f'commit {commit[:12]}: ')}")
    typer.echo(f"from-commits: {len(built)} task(s) built, {len(rejected)} commit(s) rejected")
    if not built:
        raise UsageError(f"no commit after {since} qualifies as a task")


def register(app: typer.Typer, /) -> None:
    app.add_typer(task_app, name="task")
