"""Run the tests with a temp folder of their own and fail when they leave anything in it.

``python tools/suite_temp.py COMMAND [ARG...]`` (the development venv's python: it uses certlab's
own ``trees``) makes a folder in the machine's temp folder, runs COMMAND with ``TMPDIR`` pointing
there, and then looks at what is left in it. pytest's own folder
(``pytest-of-USER``, each test's ``tmp_path``) is expected; anything else was left by certlab or by
a test (a temp folder a killed trial could not remove, a zygote's calls, a test's ``mkdtemp``), and
certlab deletes only what it made. ``make test`` runs pytest through it, so the next leak fails the
run that brings it, instead of being found later by looking in ``/tmp``.

When COMMAND passes and left nothing, the folder is removed. Otherwise it is kept for a look (the
failed tests' ``tmp_path`` is in it) and its path is printed.

A stop (Ctrl-C, SIGTERM) reaches COMMAND, which shuts down in its own way; this wrapper waits for it
and then checks as usual.

Exit codes: COMMAND's own when it fails; 1 when it passed but left something; 2 a usage error.
"""

from __future__ import annotations

import getpass
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType

from certlab_core.sdk.trees import make_temp_folder, remove_made

PREFIX = "certlab-suite-"


def expected_entries() -> set[str]:
    """What a test run may leave in its temp folder: pytest's base folder for ``tmp_path``."""
    return {f"pytest-of-{getpass.getuser()}"}


def describe(entry: Path) -> str:
    """One leftover, for the report: its name and, for a folder, how many entries it holds."""
    if entry.is_dir() and not entry.is_symlink():
        try:
            inside = sum(1 for _ in entry.rglob("*"))
        except OSError:
            return f"{entry.name}/ (unreadable)"
        return f"{entry.name}/ ({inside} entries inside)"
    return entry.name


def leftovers(folder: Path) -> list[Path]:
    """Everything in ``folder`` that the run should have removed, sorted by name."""
    allowed = expected_entries()
    return sorted(entry for entry in folder.iterdir() if entry.name not in allowed)


def run(command: list[str], folder: Path) -> int:
    """``command`` with ``TMPDIR`` set to ``folder``; its exit code once it has ended."""
    child: subprocess.Popen[bytes] | None = None

    def pass_on(signum: int, _frame: FrameType | None) -> None:
        # SIGINT from a terminal reaches the whole group, COMMAND included: nothing to pass on then.
        if child is not None and signum == signal.SIGTERM and child.poll() is None:
            child.send_signal(signum)

    # A Python handler, not SIG_IGN: COMMAND gets the default handlers back when it starts.
    previous = {signum: signal.signal(signum, pass_on) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        child = subprocess.Popen(command, env={**os.environ, "TMPDIR": str(folder)})
        code = child.wait()
        return 128 - code if code < 0 else code  # killed by a signal: a shell's code for it
    except FileNotFoundError:
        print(f"suite_temp: cannot run {command[0]!r}: no such program", file=sys.stderr)
        return 2
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print("usage: python tools/suite_temp.py COMMAND [ARG...]", file=sys.stderr)
        return 2
    made = make_temp_folder(PREFIX)  # removed by this handle alone (certlab's remove_made): never what replaced it
    folder = made.as_path
    code = run(argv, folder)
    left = leftovers(folder)
    if left:
        print(
            f"suite_temp: the run left {len(left)} entries in its temp folder {folder} (only pytest's own "
            "folder may stay; find what made each and have it removed):",
            file=sys.stderr,
        )
        for entry in left:
            print(f"  {describe(entry)}", file=sys.stderr)
        return code or 1
    if code != 0:
        print(f"suite_temp: the run's temp folder is kept for a look: {folder}", file=sys.stderr)
        return code
    if not remove_made(made):
        print(
            f"suite_temp: the run's temp folder {folder} could not be removed whole (a mount below it?)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
