"""A plugin's command gets the kernel's services through ``register(app, services)``, and they work on evidence."""

from __future__ import annotations

import json
import os
import subprocess
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import certlab_core.cli as cli
from certlab_core._runtime.registry import discover
from certlab_core.cli import builtin, takes_services
from certlab_core.cli.services import services_for
from certlab_core.plugin import InstrumentError, UsageError, hookimpl
from certlab_core.sdk.canonical import seal_of

ROOT = Path(__file__).resolve().parent.parent
STORE = ROOT / "tests" / "archived_stores" / "block"
CERTIFICATION = ROOT / "certifications" / "null-all"

# A third party's plugin: one command that reads a run store through the services it is given, one that takes only app.
SERVED_PLUGIN = """
import typer
from pathlib import Path
from certlab_core.plugin import Command, Services, hookimpl


def register_verdict(app: typer.Typer, services: Services, /) -> None:
    @app.command("store-verdict")
    def store_verdict(rundir: Path, trial: str) -> None:
        store = services.open_store(rundir)
        line = store.trial(trial)
        same = services.trial_identity(store.manifest, trial) == line["identity"]
        decision = services.recompute_decision(store)
        print(f"{trial} {line['outcome']} identity-holds={same} verdict={decision['verdict']}")


def register_plain(app: typer.Typer) -> None:
    @app.command("plain-hello")
    def plain_hello() -> None:
        print("hello without services")


@hookimpl
def certlab_commands() -> list[Command]:
    return [
        Command(name="store-verdict", description="a trial's outcome and its verdict", register=register_verdict),
        Command(name="plain-hello", description="says hello", register=register_plain),
    ]
"""


@pytest.fixture
def served_cli(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., int]]:
    """``certlab`` in this process with the plugin above installed beside the kernel's commands."""
    module = types.ModuleType("served")
    module.__dict__["hookimpl"] = hookimpl
    exec(compile(SERVED_PLUGIN, "served", "exec"), module.__dict__)
    monkeypatch.setattr(
        cli, "_discover_with_kernel", lambda: discover(extra=[(cli.KERNEL_PLUGIN, builtin), ("served", module)])
    )
    cli.app.cache_clear()
    yield lambda *args: cli.main(list(args))
    cli.app.cache_clear()


def test_a_command_that_takes_the_services_gets_them_and_reads_a_store(
    served_cli: Callable[..., int], capsys: pytest.CaptureFixture[str]
) -> None:
    code = served_cli("store-verdict", str(STORE), "candidate/reserve-timeout/0")
    captured = capsys.readouterr()
    assert code == 0, captured.err
    stored = json.loads((STORE / "decision.json").read_text(encoding="utf-8"))["verdict"]
    assert captured.out == f"candidate/reserve-timeout/0 failure identity-holds=True verdict={stored}\n"
    assert "could not be registered" not in captured.err


def test_a_command_that_takes_only_app_is_registered_as_before(
    served_cli: Callable[..., int], capsys: pytest.CaptureFixture[str]
) -> None:
    assert served_cli("plain-hello") == 0
    assert capsys.readouterr().out == "hello without services\n"


def test_the_signature_says_whether_register_takes_the_services() -> None:
    """Only a required second positional parameter: whatever worked as ``register(app)`` is still called so."""

    def plain(app: Any) -> None: ...
    def served(app: Any, services: Any, /) -> None: ...
    def keyword_only(app: Any, *, services: Any = None) -> None: ...
    def optional(app: Any, verbose: bool = False) -> None: ...
    def anything(*args: Any) -> None: ...

    class Registering:
        def __call__(self, app: Any, services: Any) -> None: ...

    checked = (plain, served, keyword_only, optional, anything, Registering(), print)
    assert [takes_services(f) for f in checked] == [False, True, False, False, False, True, False]


# --------------------------------------------------------------------------- the services themselves


def test_a_store_view_holds_the_sealed_manifest_and_checked_lines() -> None:
    services = services_for()
    store = services.open_store(STORE)
    assert store.folder == STORE
    stored = json.loads((STORE / "manifest.json").read_text(encoding="utf-8"))
    assert (store.manifest["seal"], store.manifest["experiment"]) == (stored["seal"], stored["experiment"])
    # An older certlab wrote it: the view shows the fields added since at their defaults, and is still the store's.
    assert store.manifest["budgets"]["tokens"] is None and "tokens" not in stored["budgets"]
    assert seal_of(dict(store.manifest)) != stored["seal"]
    services.check_manifest(store.manifest, "the store's manifest")
    line = store.trial("candidate/reserve-timeout/0")
    assert (line["outcome"], line["failure_mode"]) == ("failure", "tool-fault-uncaught")
    with pytest.raises(UsageError, match="is not a trial of"):
        store.trial("candidate/no-such-condition/0")
    twin = store.trial("baseline/reserve-timeout/0")
    assert services.failure_fingerprint(line, twin).startswith("tool-fault-uncaught")


def test_judging_an_ending_gives_the_runners_verdict() -> None:
    services = services_for()
    manifest = services.open_store(STORE).manifest
    ending = {"detail": "", "exit_code": None}
    crashed = {"agent": {"status": "crashed", **ending}, "error": None, "uncaught_tool_error": True}
    completed = {"agent": {"status": "completed", **ending}, "error": None}
    assert services.judge(manifest, crashed, None) == ("failure", "tool-fault-uncaught", None)
    assert services.judge(manifest, completed, {"passed": True}) == ("success", None, None)
    assert services.judge(manifest, completed, {"passed": False}) == ("failure", "oracle-rejected", None)


def test_a_manifest_a_command_edits_is_checked_as_manifest_json_is() -> None:
    services = services_for()
    manifest = dict(services.open_store(STORE).manifest)
    services.check_manifest(manifest, "the store's manifest")
    assert services.trial_identity(manifest, "baseline/clean/99999") is None
    edited = {**manifest, "n_per_arm": manifest["n_per_arm"] + 1}
    with pytest.raises(InstrumentError, match=r"^an edited manifest: the seal does not match"):
        services.check_manifest(edited, "an edited manifest")
    resealed = {**edited, "seal": seal_of(edited)}
    with pytest.raises(InstrumentError, match=r"^a resealed manifest: schedule does not follow"):
        services.check_manifest(resealed, "a resealed manifest")


def test_a_bundle_view_finds_a_certifications_trial_and_names_others_for_a_wrong_id() -> None:
    services = services_for()
    bundle = services.open_bundle(CERTIFICATION)
    first = bundle.document["trials"][0]
    assert bundle.trial(first["id"]) == first
    with pytest.raises(UsageError, match="holds no trial 'nope/none/1'; its trials are "):
        bundle.trial("nope/none/1")


CHILD = """
import json
from pathlib import Path


def main(services, store, out):
    view = services.open_store(Path(store))
    line = view.trial("candidate/reserve-timeout/0")
    same = services.trial_identity(view.manifest, line["id"]) == line["identity"]
    Path(out).write_text(json.dumps([line["outcome"], same]))
    return 3
"""


def test_a_child_interpreter_gets_services_of_its_own(tmp_path: Path) -> None:
    (tmp_path / "served_child.py").write_text(CHILD)
    argv = services_for().child_argv("served_child:main", str(STORE), str(tmp_path / "out.json"))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    ran = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert ran.returncode == 3, ran.stderr
    assert json.loads((tmp_path / "out.json").read_text()) == ["failure", True]
