"""The ``certlab`` command line: one typer app; each command group registers itself from its own module."""

from __future__ import annotations

import importlib
import sys
import traceback
from typing import Any

import typer

from certlab_core.plugin.errors import EXIT_USAGE, CertlabError

app = typer.Typer(
    name="certlab",
    help="CI-grade reliability evidence for AI agents: certify an agent, gate a change.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

# Each module defines ``register(app)``, which registers the commands listed beside it; a
# capability adds its module and its commands here, nowhere else. A command line loads only the
# module of its command (help and unknown commands load them all); tests/test_cli.py checks
# that each module registers exactly the commands listed.
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "certlab_core.commands.plugins_cmd": ("plugins",),
    "certlab_core.commands.certify_cmd": ("certify", "regrade", "prove"),
    "certlab_core.commands.demo_cmd": ("demo",),
    "certlab_core.commands.compare_cmd": ("compare",),
    "certlab_core.commands.stats_cmd": ("stats", "plan", "selfcheck"),
    "certlab_core.commands.gate_cmd": ("run", "gate", "schema", "init"),
    "certlab_core.commands.diagnosis_cmd": ("report", "diff", "rederive", "minimize", "bundle", "replay"),
    "certlab_core.commands.acceptance_cmd": ("init-task", "lock", "leakscan", "predict"),
    "certlab_core.commands.signing_cmd": ("keygen", "sign", "verify"),
    "certlab_core.commands.preflight_cmd": ("preflight",),
}

_state = {"debug": False}


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show the full traceback of an error."),
) -> None:
    _state["debug"] = debug


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


def _register_all() -> None:
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(app)


def _register_for(args: list[str]) -> None:
    """Register the module of the command ``args`` names (the first word that is not an option), else every module."""
    name = next((arg for arg in args if not arg.startswith("-")), None)
    for module_name, commands in COMMAND_MODULES.items():
        if name in commands:
            importlib.import_module(module_name).register(app)
            return
    _register_all()


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; a CertlabError becomes one line on stderr and its exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    _state["debug"] = "--debug" in args
    _register_for(args)
    try:
        returned = app(args=args, prog_name="certlab", standalone_mode=False)
        if isinstance(returned, int):  # click returns the code of typer.Exit when not standalone
            return returned
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
        return 130
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
            return 130
        if _state["debug"]:
            traceback.print_exc()
        print(
            f"certlab: internal error: {type(error).__name__}: {error} (run again with --debug for the traceback)",
            file=sys.stderr,
        )
        return 3
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
