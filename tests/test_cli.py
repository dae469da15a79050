"""The CLI's own contract: usage errors are one line and exit 4, help exits 0, no traceback without --debug."""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer
from conftest import CERTLAB_AS_IN_A_TERMINAL, REPO, run_certlab

from certlab_core.cli import COMMAND_MODULES
from certlab_core.sdk.processes import live_descendants


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["certify", "--bogus"], "No such option: --bogus"),
        (["certify", "--family", "intervals"], "Missing option '--agent'"),
        (["regrade"], "Missing argument 'folder'"),
        (["no-such-command"], "No such command 'no-such-command'"),
        (
            ["certify", "--family", "intervals", "--agent", "oracle", "--out", "x", "--trials", "many"],
            "Invalid value for '--trials'",
        ),
        # Each command that takes --workers refuses a count below 0 alike (regrade and prove took it as 1)
        (["run", "no-such.yaml", "-w", "-2"], "--workers -2: give a number of trials at once, 1 or more"),
        (["regrade", str(REPO / "certifications" / "oracle-all"), "-w", "-1"], "--workers -1: give a number of"),
        (["prove", "-f", "intervals", "-w", "-1"], "--workers -1: give a number of mutants graded at once"),
        # A smoke call without a time limit (nan), or one already past it (-5: "timed out after -5 s")
        (["preflight", "-a", "command", "--agent-arg", "true", "--timeout", "nan"], "--timeout nan: give a number"),
        (["preflight", "-a", "command", "--agent-arg", "true", "--timeout", "-5"], "--timeout -5: give a number"),
    ],
)
def test_usage_errors_are_one_line_and_exit_4(args: list[str], message: str) -> None:
    done = run_certlab(*args)
    assert done.returncode == 4, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("certlab: error: ") and message in lines[0], done.stderr


@pytest.mark.parametrize(
    ("command", "plugin", "distribution"),
    [
        ("lock", "acceptance", "certlab-acceptance"),
        ("diff", "diagnosis", "certlab-diagnosis"),
        ("replay", "diagnosis", "certlab-diagnosis"),
        ("demo", "demo", "certlab-demo"),
    ],
)
def test_a_plugins_command_left_out_names_its_plugin_and_distribution(
    command: str, plugin: str, distribution: str
) -> None:
    # Before, click said "No such command 'lock'", which told no one what to install or enable.
    done = run_certlab(command, "x", env=dict(os.environ, CERTLAB_PLUGINS="intervals"))
    assert done.returncode == 4, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"certlab: error: unknown command {command!r}"), done.stderr
    assert f"the plugin {plugin} ({distribution}), which CERTLAB_PLUGINS leaves out" in lines[0]


def test_help_lists_the_commands() -> None:
    done = run_certlab("--help")
    assert done.returncode == 0
    for command in ("certify", "regrade", "plugins", "demo", "compare", "report", "diff", "replay"):
        assert command in done.stdout


def test_no_arguments_shows_help() -> None:
    done = run_certlab()
    assert "Usage" in done.stdout + done.stderr


@pytest.mark.parametrize("module_name", sorted(COMMAND_MODULES))
def test_each_command_module_registers_exactly_the_commands_listed_for_it(module_name: str) -> None:
    # A command line loads only the module listed for its command, so the list must be the truth.
    app = typer.Typer()
    importlib.import_module(module_name).register(app)
    registered = {command.name for command in app.registered_commands}
    registered |= {group.name for group in app.registered_groups}
    assert registered == set(COMMAND_MODULES[module_name])


def test_every_command_is_listed_once() -> None:
    names = [name for commands in COMMAND_MODULES.values() for name in commands]
    assert len(names) == len(set(names))


def test_a_command_after_the_debug_flag_still_loads_its_module() -> None:
    done = run_certlab("--debug", "schema", "trial")
    assert done.returncode == 0, done.stderr
    assert '"_marks"' in done.stdout


def _app_raising(error: BaseException) -> typer.Typer:
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

    @app.callback()
    def _root() -> None:
        pass

    @app.command("boom")
    def _boom() -> None:
        raise error

    return app


@pytest.mark.parametrize(
    ("error", "code", "line"),
    [
        (RuntimeError("the unforeseen"), 3, "certlab: internal error: RuntimeError: the unforeseen (run again with"),
        (typer.Abort(), 130, "certlab: aborted"),
    ],
)
def test_an_unforeseen_error_is_one_line_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], error: BaseException, code: int, line: str
) -> None:
    # The last-resort handler itself must not fail (it once looked Abort up where typer no longer keeps it).
    from certlab_core import cli

    raising = _app_raising(error)
    monkeypatch.setattr(cli, "app", lambda: raising)
    monkeypatch.setattr(cli, "_register_for", lambda _args: None)
    assert cli.main(["boom"]) == code
    err = capsys.readouterr().err
    assert err.startswith(line) and err.count("\n") == 1, err


def test_a_plugins_command_line_imports_no_other_command_module() -> None:
    # Before, `certlab diff` registered (and imported) every kernel command module first: about 0.3 s.
    code = (
        "import sys; from certlab_core.cli import main; code = main(['diff', '--help']); "
        "print(code, sorted(m for m in sys.modules if m.startswith('certlab_core.cli.') and m.endswith('_cmd')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "0 []", done.stdout
    assert "--all-steps" in done.stdout  # diff's own help


def test_the_command_list_loads_neither_typer_nor_a_command_module() -> None:
    # Before, `certlab --help` registered every command (each kernel and plugin command module imported)
    # and formatted the list with rich: about 2.4 s at load 4, against 0.3 s asked of it.
    code = (
        "import sys; from certlab_core.cli import main; code = main(['--help']); "
        "print(code, sorted(m for m in sys.modules if m == 'typer' or m.startswith('rich') or m.endswith('_cmd')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "0 []", done.stdout
    assert "certify " in done.stdout and "Usage: certlab" in done.stdout


@pytest.mark.parametrize("module_name", sorted(COMMAND_MODULES))
def test_the_listed_line_of_each_kernel_command_is_the_first_line_of_its_help(module_name: str) -> None:
    # The command list is printed from COMMAND_MODULES, so its lines must be the commands' own.
    app = typer.Typer()
    importlib.import_module(module_name).register(app)
    helps = {command.name: command.help or (command.callback.__doc__ or "") for command in app.registered_commands}
    helps |= {group.name: group.typer_instance.info.help or "" for group in app.registered_groups}  # type: ignore[union-attr]
    for name, line in COMMAND_MODULES[module_name].items():
        first = " ".join(str(helps[name]).strip().split("\n\n")[0].split())
        assert first == line, (name, first)


@pytest.mark.parametrize(("stop", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_a_command_with_no_interrupt_line_of_its_own_still_says_it_was_interrupted(
    stop: signal.Signals, code: int
) -> None:
    # regrade and prove ended at Ctrl-C with exit 130 and nothing on stderr: typer turns the interrupt into a
    # quiet exit, and only certify and run had a line of their own.
    published = REPO / "certifications" / "oracle-all"
    runner = subprocess.Popen(
        [*CERTLAB_AS_IN_A_TERMINAL, "regrade", str(published), "--sandbox", "none"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while not live_descendants(runner.pid):  # its regrades are forked: the work is under way
        assert runner.poll() is None and time.monotonic() < deadline, "regrade ended before it could be stopped"
        time.sleep(0.01)
    os.killpg(runner.pid, stop)  # as Ctrl-C and timeout do: to every process of the group
    _out, err = runner.communicate(timeout=60)
    assert runner.returncode == code, err
    assert err.strip().splitlines()[-1] == "certlab: interrupted"


def test_preflight_gives_the_smoke_call_a_temp_folder_of_its_own_and_deletes_what_the_agent_left_there(
    tmp_path: Path,
) -> None:
    # Before: the agent of the smoke call was given the user's TMPDIR, and what it wrote there stayed.
    users_temp = tmp_path / "users-temp"
    users_temp.mkdir()
    seen = tmp_path / "seen"
    agent = tmp_path / "agent.sh"
    agent.write_text(f'#!/bin/sh\necho "$TMPDIR" > {seen}\necho left > "$TMPDIR/agent-was-here"\necho OK\n')
    agent.chmod(0o755)
    env = {**os.environ, "TMPDIR": str(users_temp)}
    done = run_certlab("preflight", "-a", "command", "--agent-arg", str(agent), "--timeout", "30", env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    agents_temp = seen.read_text().strip()
    assert agents_temp != str(users_temp) and not Path(agents_temp).exists()
    assert list(users_temp.iterdir()) == []
