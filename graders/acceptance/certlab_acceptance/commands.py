"""``init-task``, ``lock``, ``leakscan``, ``predict``: the user-task commands.

A user's own task: scaffold a working one (``init-task``), seal its cases (``lock``), name every
artefact of a run that holds most of its answers (``leakscan``), register a prediction before the
run and check it after (``predict``). Each command imports what it runs inside it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from certlab_acceptance.cases import read_cases
from certlab_acceptance.user_task import TASK_FILE, load_user_task
from certlab_core.plugin import CertlabError, InstrumentError, UsageError
from certlab_core.plugin.errors import EXIT_ERROR, EXIT_MISMATCH
from certlab_core.sdk import safe_io
from certlab_core.sdk.services import installed_plugins

BUNDLE_FILE = "bundle.json"


def init_task_command(
    directory: Path = typer.Argument(..., help="A new (or empty) folder for the task."),
    name: str = typer.Option("", "--name", help="The task's name (default: the folder's name)."),
) -> None:
    """Scaffold a small working task of your own: fixture, visible tests, prompt, held-out cases."""
    from certlab_acceptance.scaffold import scaffold

    written = scaffold(directory, name or None)
    for path in written:
        typer.echo(f"wrote {path}")
    typer.echo(f"next: certlab lock {directory}, then certlab certify --task {directory} --agent ... --out DIR")


def lock_command(
    directory: Path = typer.Argument(..., help="The experiment directory (certlab.yaml, fixture/, tests/, cases/)."),
    again: bool = typer.Option(False, "--again", help="Lock anew an experiment that is already locked."),
    check: bool = typer.Option(
        False, "--check", help="Only check that nothing moved since the lock (exit 3 if it did)."
    ),
) -> None:
    """Seal the held-out cases with their fingerprints, refusing any layout that leaks them."""
    from certlab_acceptance.lock import LockRefused, lock_status, write_lock

    task = load_user_task(directory)
    registry = installed_plugins()
    if check:
        moved = lock_status(task, registry)
        for line in moved:
            typer.echo(f"moved: {line}")
        if moved:
            raise InstrumentError(f"{len(moved)} fingerprinted file(s) moved since the lock; a run now gives ERROR")
        typer.echo(f"lock: nothing moved since {task.root} was locked")
        return
    try:
        path, document = write_lock(task, registry, again=again)
    except LockRefused as refused:
        for problem in refused.problems:
            typer.echo(f"refused: {problem}", err=True)
        raise
    groups: dict[str, int] = {}
    for label in document["fingerprints"]:
        group = label.split("/", 1)[0].split(":", 1)[0]
        groups[group] = groups.get(group, 0) + 1
    typer.echo(
        f"locked: {document['cases']['count']} held-out cases (sha256 {document['cases']['sha256'][:12]}), "
        f"{len(document['fingerprints'])} files fingerprinted ("
        + ", ".join(f"{group} {count}" for group, count in sorted(groups.items()))
        + f"); lock {path}, seal {document['seal'][:12]}"
    )


def _call_cases(path: Path) -> list[Any]:
    """The call cases of a cases file; a file of held-out tests (a task built from a commit) is one line."""
    from certlab_acceptance.hidden_tests import is_hidden_tests

    try:
        hidden = path.is_file() and is_hidden_tests(path.read_bytes())
    except OSError:
        hidden = False
    if hidden:
        raise UsageError(
            f"{path}: the held-out cases are test files (a task built from a commit); leakscan looks for the "
            "answers of call cases only"
        )
    return read_cases(path)


def _cases_for_scan(rundir: Path, cases: list[Path], tasks: list[Path], families: list[str]) -> list[Any]:
    found: list[Any] = []
    for file in cases:
        found.extend(_call_cases(file))
    if tasks:
        for directory in tasks:
            found.extend(_call_cases(load_user_task(directory).cases))
    names = list(families)
    bundle = rundir / "bundle.json"
    if not (cases or tasks or families) and bundle.is_file():
        try:
            names = [f["name"] for f in json.loads(bundle.read_text(encoding="utf-8"))["families"]]
        except (OSError, ValueError, KeyError, TypeError):
            names = []
    if names:
        registry = installed_plugins()
        for name in names:
            try:
                family = registry.get("task_families", name)
            except CertlabError:
                named = f"--family {name!r} is" if families else f"the run names the task {name!r}, which is"
                said = f"{named} no installed family; give its cases with --task DIR or --cases FILE"
                raise UsageError(said) from None
            found.extend(read_cases(Path(family.cases_file)))
    if not found:
        raise UsageError("name the held-out cases to look for: --task DIR, --family NAME or --cases FILE")
    return found


def leakscan_command(
    rundir: Path = typer.Argument(..., help="A run's folder: a certification, a run store, work copies, logs."),
    task: list[Path] = typer.Option([], "--task", help="An experiment directory whose held-out cases to look for."),
    family: list[str] = typer.Option([], "--family", help="An installed family whose held-out cases to look for."),
    cases: list[Path] = typer.Option([], "--cases", help="A held-out cases file (acceptance.jsonl) to look for."),
    show_all: bool = typer.Option(False, "--all", help="Also name each artefact holding a minority of the answers."),
) -> None:
    """Name every artefact holding most of the held-out answers; exit 1 when there is one."""
    from certlab_acceptance.leakscan import scan_paths

    if not rundir.exists():
        raise UsageError(f"{rundir}: no such folder")
    held_out = _cases_for_scan(rundir, cases, task, family)
    findings = scan_paths([rundir], held_out, rundir)
    leaks = [f for f in findings if f.majority]
    for finding in leaks:
        typer.echo(f"LEAK: {finding.artefact} holds {finding.found} of the {finding.total} held-out answers")
    minority = [f for f in findings if not f.majority]
    if show_all:
        for finding in minority:
            typer.echo(f"some: {finding.artefact} holds {finding.found} of the {finding.total} held-out answers")
    elif minority:
        typer.echo(
            f"leakscan: {len(minority)} more artefact(s) hold a minority of the answers (at most {minority[0].found}); "
            "--all names them"
        )
    if leaks:
        typer.echo(f"leakscan: {len(leaks)} artefact(s) hold most of the held-out answers")
        raise typer.Exit(EXIT_MISMATCH)
    typer.echo(f"leakscan: no artefact holds most of the {len(held_out)} held-out answers")


def predict_command(
    directory: Path = typer.Argument(..., help="The experiment directory."),
    expect: str = typer.Option("", "--expect", help="The prediction: which arm wins, by how much."),
    check: bool = typer.Option(False, "--check", help="Check every registered prediction instead of adding one."),
    against: Path = typer.Option(None, "--against", help="With --check: a certification that recorded them."),
) -> None:
    """Register a prediction sealed before the run, or check that none was edited since (exit 1 if one was)."""
    from certlab_acceptance.prediction import check_predictions
    from certlab_acceptance.prediction import register as register_prediction

    if not directory.is_dir():
        raise UsageError(f"{directory}: no such experiment directory")
    if not (directory / TASK_FILE).is_file():  # predictions belong to an experiment; nothing is written elsewhere
        raise UsageError(
            f"{directory / TASK_FILE}: no {TASK_FILE}, so {directory} is no experiment; "
            f"predict in the folder of one (certlab init-task makes one)"
        )
    if check or against is not None:
        recorded: list[dict[str, Any]] = []
        if against is not None:
            recorded = recorded_predictions(against)
        statuses = check_predictions(directory, recorded)
        if not statuses:
            typer.echo("predict: no prediction registered")
            return
        for status in statuses:
            state = "intact" if status.intact else "EDITED"
            typer.echo(f"prediction {status.index} ({status.registered_at}): {state}: {status.expect}")
            for problem in status.problems:
                typer.echo(f"  {problem}")
        edited = [s for s in statuses if not s.intact]
        if edited:
            typer.echo(f"predict: {len(edited)} prediction(s) were edited after they were sealed")
            raise typer.Exit(EXIT_MISMATCH)
        typer.echo(f"predict: {len(statuses)} prediction(s) intact")
        return
    if not expect:
        raise UsageError('give the prediction with --expect "..." (or --check to verify the registered ones)')
    entry = register_prediction(directory, expect)
    typer.echo(f"prediction {entry['index']} sealed at {entry['registered_at']}: seal {entry['seal'][:12]}")


def recorded_predictions(folder: Path) -> list[dict[str, Any]]:
    """The predictions a certification recorded when it ran (``bundle.json``'s ``predictions``)."""
    path = folder / BUNDLE_FILE if folder.is_dir() else folder
    recorded = read_certification(path).get("predictions", [])
    if not isinstance(recorded, list):
        raise CertlabError(f"{path}: malformed predictions record", EXIT_ERROR)
    return [entry for entry in recorded if isinstance(entry, dict)]


def read_certification(path: Path) -> dict[str, Any]:
    """A certification bundle, read as hostile input and checked as ``certlab regrade`` checks it (exit 3)."""
    return safe_io.load_certification(path)


# The function of each command; certlab_acceptance.plugin holds their records and one-line descriptions.
COMMANDS: dict[str, Callable[..., None]] = {
    "init-task": init_task_command,
    "lock": lock_command,
    "leakscan": leakscan_command,
    "predict": predict_command,
}
