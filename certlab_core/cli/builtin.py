"""The kernel's own commands, provided through ``certlab_commands``.

One module per command group, each with ``register(app)``. This module is the kernel's
built-in command plugin: the CLI registers it beside the installed plugins, so a plugin's
command that takes a kernel command's name is refused where it is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from certlab_core.plugin.hookspecs import hookimpl
from certlab_core.plugin.types.command import Command, RegisterCommand

if TYPE_CHECKING:
    import typer

# Each module defines ``register(app)``, which registers the commands listed beside it, each with the
# first line of its help; a capability adds its module and its commands here, nowhere else. A command
# line loads only the module of its command (unknown commands load them all), and ``certlab --help``
# lists the commands from this table without loading any; tests/test_cli.py checks that each module
# registers exactly the commands listed, with these lines.
COMMAND_MODULES: dict[str, dict[str, str]] = {
    "certlab_core.cli.plugins_cmd": {
        "plugins": "List the installed certlab plugins and what each provides; name the broken ones.",
    },
    "certlab_core.cli.certify_cmd": {
        "certify": "Prove the instrument, calibrate it, then certify an agent on the family's seeded defects.",
        "regrade": "Re-earn every verdict of a bundle from its recorded changes: consistent, stale or mismatch.",
        "prove": "Prove the instrument: the clean tree passes, each seeded tree fails; with --mutants, score it "
        "against mutants.",
    },
    "certlab_core.cli.gate_cmd": {
        "run": "Run an A/B experiment; the exit code is the verdict (PASS 0, BLOCK 1, INCONCLUSIVE 2, ERROR 3).",
        "gate": "Recompute the verdict from a run store alone; the exit code is the verdict.",
        "schema": "Print a JSON Schema generated from the code (default: the experiment descriptor).",
        "init": "Check the references in a child process and write a small smoke descriptor.",
    },
    "certlab_core.cli.report_cmd": {
        "report": "Verdict and bounds per condition, per-arm success, failure clusters, faults, errors, cost and "
        "pass^k.",
        "rederive": "Regenerate decision.json from the manifest and the trials; exit 0 identical (or written), "
        "1 differs.",
    },
    "certlab_core.cli.preflight_cmd": {
        "preflight": "Check an agent's binary, version, credentials or base URL, and make one smoke call, before "
        "a live run.",
    },
}

_registered: set[str] = set()


def _registering(module_name: str) -> RegisterCommand:
    """Register every command of ``module_name`` once, however many of its commands are asked for."""

    def register(app: typer.Typer) -> None:
        if module_name not in _registered:
            _registered.add(module_name)
            importlib.import_module(module_name).register(app)

    return register


@hookimpl
def certlab_commands() -> list[Command]:
    return [
        Command(name=name, description=summary, register=_registering(module_name))
        for module_name, commands in COMMAND_MODULES.items()
        for name, summary in commands.items()
    ]
