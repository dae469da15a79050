"""The ``certlab`` command line: one typer app, fed by ``certlab_commands``.

May import: any part of the kernel.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import sys
import textwrap
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from certlab_core.cli.builtin import COMMAND_MODULES
from certlab_core.evidence.record_file import interrupt_said, stop_line_handler
from certlab_core.plugin.errors import EXIT_USAGE, CertlabError
from certlab_core.plugin.types.command import Command

SUMMARY = "CI-grade reliability evidence for AI agents: certify an agent, gate a change."
ROOT_OPTIONS = (("--debug", "Show the full traceback of an error."), ("--help", "Show this message and exit."))

if TYPE_CHECKING:
    import typer

    from certlab_core._runtime.registry import Registry
    from certlab_core.plugin.types.command import RegisterCommand, RegisterServedCommand

KERNEL_PLUGIN = "certlab"  # the name of the kernel's built-in command plugin in the registry
KERNEL_COMMANDS = frozenset(name for commands in COMMAND_MODULES.values() for name in commands)

_state = {"debug": False, "terminated": False}
#: The plugin command this command line runs, as a line names it ("the command 'lock' of certlab-acceptance 0.1.0
#: (plugin acceptance)"): what it raises unforeseen is its own error, not certlab's. Empty for a kernel command.
_plugin_command: list[str] = []
#: The exit code of a command that SIGTERM stopped (128 + 15, as a shell reports a process it killed).
EXIT_TERMINATED = 128 + signal.SIGTERM
EXIT_INTERRUPTED = 130


def stop_on_sigterm() -> None:
    """Make SIGTERM in this process what Ctrl-C is: the interrupt's line said, every ``finally`` run, exit 143.

    A CI job cancelled, ``timeout`` or ``docker stop`` sends SIGTERM, whose default kills the
    process where it stands: certify's and run's temp folders and trial processes were left
    behind, and nothing said what was recorded. The handler calls whatever handles SIGINT now
    (certify's and run's "interrupted: N of M trials recorded; resume with ..."), so the two
    stops are one path; a second SIGTERM kills at once. A forked child of this process leaves
    the stop to it (``timeout`` signals the whole process group): this process kills each child
    with everything it started, where a child dying of it alone left its agent running.
    """
    owner = os.getpid()

    def terminated(signum: int, frame: Any) -> None:
        if os.getpid() != owner:
            return
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _state["terminated"] = True
        # The interrupt's line, also where SIGINT was ignored from the start (a script's background job).
        on_interrupt = stop_line_handler() or signal.getsignal(signal.SIGINT)
        if callable(on_interrupt):
            on_interrupt(signal.SIGINT, frame)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminated)


@functools.cache
def app() -> typer.Typer:
    """The typer app every command registers on; built on first use, so ``certlab --help`` never imports typer."""
    import typer

    made = typer.Typer(
        name="certlab",
        help=SUMMARY,
        add_completion=False,
        no_args_is_help=True,
        pretty_exceptions_enable=False,
    )

    @made.callback()
    def _root(debug: bool = typer.Option(False, "--debug", help=ROOT_OPTIONS[0][1])) -> None:
        _state["debug"] = debug

    return made


def fail(message: str, exit_code: int = EXIT_USAGE) -> None:
    """Raise the one-line error the CLI prints (``certlab: error: ...``) with ``exit_code``."""
    raise CertlabError(message, exit_code)


def _click_exceptions() -> Any:
    """click's exception classes: typer vendors click in recent releases, older ones depend on it."""
    try:
        from typer._click import exceptions
    except ImportError:  # pragma: no cover  (typer releases that depend on click)
        from click import exceptions  # type: ignore[no-redef]
    return exceptions


def warn_broken(registry: Registry) -> None:
    """A warning line on stderr per plugin that failed to load: the plugin, its distribution and its error."""
    for failure in registry.failures:
        print(f"certlab: warning: {failure.line()}", file=sys.stderr)


def _plugin_commands(registry: Registry, wanted: str | None, names: list[str] | None = None) -> list[Command]:
    """The plugins' ``Command`` records the command line takes (of ``names``, else all); one warning per refusal.

    A plugin's command may not take a kernel command's name, nor a name another plugin provides too.
    """
    taken: list[Command] = []
    for name in registry.names(Command) if names is None else names:
        if name in KERNEL_COMMANDS:
            if name == wanted:
                continue
            for plugin in registry.providers_of(Command, name):
                if plugin != KERNEL_PLUGIN:
                    print(
                        f"certlab: warning: {registry.describe_source(plugin)} provides the command {name!r}, "
                        "which the kernel's own command takes; it is ignored",
                        file=sys.stderr,
                    )
            continue
        try:
            taken.append(registry.get(Command, name))
        except CertlabError as refused:  # a name two plugins provide
            if name == wanted:
                raise
            print(f"certlab: warning: {refused.message}", file=sys.stderr)
    return taken


def _discover_with_kernel() -> Registry:
    from certlab_core._runtime.registry import discover
    from certlab_core.cli import builtin

    return discover(extra=[(KERNEL_PLUGIN, builtin)])


def takes_services(register: Callable[..., None]) -> bool:
    """Whether a command's ``register`` takes the services: a second positional parameter, ``register(app, services)``.

    Only a required one: a ``register`` that worked as ``register(app)`` is called so still (one
    whose second parameter has a default, takes ``*args``, or has no signature to read).
    """
    import inspect

    try:
        parameters = list(inspect.signature(register).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 and positional[1].default is inspect.Parameter.empty


def register_command(command: Command, registry: Any | None) -> None:
    """Add a plugin's command to the app: ``register(app, services)`` when it takes them, else ``register(app)``."""
    if takes_services(command.register):
        from certlab_core.cli.services import services_for

        cast("RegisterServedCommand", command.register)(app(), services_for(registry))
    else:
        cast("RegisterCommand", command.register)(app())


def _register_all(wanted: str | None = None) -> None:
    """Register the installed plugins' commands (``certlab_commands``) and the kernel's; one line per refusal.

    When ``wanted`` is one plugin's command, it alone is registered (no other command module is imported).
    """
    from certlab_core.cli import builtin

    registry = _discover_with_kernel()
    if wanted != "plugins":  # which lists them itself
        warn_broken(registry)
    provided = registry.names(Command)
    # A plugin's command line registers that one command; a name nothing provides registers them all.
    alone = [wanted] if wanted is not None and wanted in provided and wanted not in KERNEL_COMMANDS else []
    if alone:
        source = registry.describe_source(registry.plugin_name_of(Command, alone[0]))
        _plugin_command[:] = [f"the command {alone[0]!r} of {source}"]
    else:
        for command in builtin.certlab_commands():
            register_command(command, registry)
    for command in _plugin_commands(registry, wanted, alone or None):
        try:
            register_command(command, registry)
        except Exception as error:  # a plugin's register that breaks must not take the command line down
            source = registry.describe_source(registry.plugin_name_of(Command, command.name))
            print(
                f"certlab: warning: the command {command.name!r} of {source} could not be registered: "
                f"{type(error).__name__}: {error}",
                file=sys.stderr,
            )
    if wanted and wanted not in provided and registry.providers.of("commands", wanted):
        registry.get(Command, wanted)  # refused: which distribution provides it, and what to install


def top_help() -> str:
    """``certlab --help``: the usage, the root options and every command's first help line, no module loaded.

    The kernel's lines come from ``COMMAND_MODULES``, a plugin's from its ``Command`` record's description;
    a plugin that failed to load, or a command that cannot be taken, is one warning line on stderr.
    """
    registry = _discover_with_kernel()
    warn_broken(registry)
    lines = {name: summary for commands in COMMAND_MODULES.values() for name, summary in commands.items()}
    for command in _plugin_commands(registry, None):
        lines[command.name] = command.description[:1].upper() + command.description[1:]
    width = min(shutil.get_terminal_size((80, 24)).columns, 100)
    column = max(len(name) for name in [*lines, *(option for option, _ in ROOT_OPTIONS)]) + 4

    def rows(pairs: list[tuple[str, str]]) -> list[str]:
        shown = []
        for name, text in pairs:
            wrapped = textwrap.wrap(text, max(width - column, 30), break_on_hyphens=False) or [""]
            shown.append(f"  {name.ljust(column - 2)}{wrapped[0]}")
            shown.extend(" " * column + more for more in wrapped[1:])
        return shown

    return "\n".join(
        [
            "Usage: certlab [OPTIONS] COMMAND [ARGS]...",
            "",
            f"  {SUMMARY}",
            "",
            "Options:",
            *rows(list(ROOT_OPTIONS)),
            "",
            "Commands:",
            *rows(list(lines.items())),
            "",
        ]
    )


def _register_for(args: list[str]) -> None:
    """Register the kernel command ``args`` names (the first word that is not an option), else every command."""
    from certlab_core.cli import builtin

    name = next((arg for arg in args if not arg.startswith("-")), None)
    if name in KERNEL_COMMANDS:
        if name != "plugins":  # which lists them itself
            _warn_load_failures()
        register_command(next(c for c in builtin.certlab_commands() if c.name == name), None)
        return
    _register_all(name)


def _warn_load_failures() -> None:
    """A kernel command's warning lines for the plugins that failed to load (the command itself reports the rest)."""
    from certlab_core._runtime.registry import discover

    try:
        registry = discover()
    except CertlabError:  # CERTLAB_PLUGINS names one that is not installed: the command says so, if it looks
        return
    warn_broken(registry)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; a CertlabError becomes one line on stderr and its exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    _state["debug"] = "--debug" in args
    _plugin_command.clear()  # this command line's, not one that ran before it in this process
    asked = [arg for arg in args if arg != "--debug"]
    if asked in ([], ["--help"]):  # the command list alone: neither typer nor a command module is loaded
        try:
            print(top_help(), file=sys.stdout if asked else sys.stderr, end="")
        except CertlabError as error:
            print(f"certlab: error: {error.message}", file=sys.stderr)
            return error.exit_code
        return 0 if asked else EXIT_USAGE
    import typer

    stop_on_sigterm()
    try:
        _register_for(args)
        returned = app()(args=args, prog_name="certlab", standalone_mode=False)
        if isinstance(returned, int):  # click returns the code of typer.Exit when not standalone (130: interrupted)
            if returned == EXIT_INTERRUPTED and not interrupt_said():
                # a command with no line of its own for it (prove, regrade) stopped silently
                print("certlab: interrupted", file=sys.stderr)
            return EXIT_TERMINATED if returned == EXIT_INTERRUPTED and _state["terminated"] else returned
    except CertlabError as error:
        if _state["debug"]:
            traceback.print_exc()
        print(f"certlab: error: {error.message}", file=sys.stderr)
        return error.exit_code
    except typer.Exit as done:
        return int(done.exit_code or 0)
    except SystemExit as done:
        return int(done.code or 0) if isinstance(done.code, int) else EXIT_USAGE
    except KeyboardInterrupt as interrupted:  # the message of certlab_core.gate.resume's handler, if it raised
        print(f"certlab: {interrupted.args[0] if interrupted.args else 'interrupted'}", file=sys.stderr)
        return EXIT_TERMINATED if _state["terminated"] else EXIT_INTERRUPTED
    except Exception as error:  # click usage errors and anything unforeseen
        click_exceptions = _click_exceptions()
        if isinstance(error, click_exceptions.NoArgsIsHelpError):
            print(error.ctx.get_help() if error.ctx else "", file=sys.stderr)
            return EXIT_USAGE
        if isinstance(error, click_exceptions.UsageError):
            where = f" (see '{error.ctx.command_path} --help')" if error.ctx else ""
            print(f"certlab: error: {error.format_message()}{where}", file=sys.stderr)
            return EXIT_USAGE
        if isinstance(error, typer.Abort):  # click turns a KeyboardInterrupt into Abort
            cause = error.__cause__
            said = cause.args[0] if isinstance(cause, KeyboardInterrupt) and cause.args else "aborted"
            print(f"certlab: {said}", file=sys.stderr)
            return EXIT_TERMINATED if _state["terminated"] else EXIT_INTERRUPTED
        if _state["debug"]:
            traceback.print_exc()
        what = f"error: {_plugin_command[0]} raised" if _plugin_command else "internal error:"
        print(
            f"certlab: {what} {type(error).__name__}: {error} (run again with --debug for the traceback)",
            file=sys.stderr,
        )
        return 3
    return 0
