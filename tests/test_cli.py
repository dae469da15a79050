"""The CLI's own contract: usage errors are one line and exit 4, help exits 0, no traceback without --debug."""

from __future__ import annotations

import pytest
from conftest import run_certlab


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
    ],
)
def test_usage_errors_are_one_line_and_exit_4(args: list[str], message: str) -> None:
    done = run_certlab(*args)
    assert done.returncode == 4, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("certlab: error: ") and message in lines[0], done.stderr


def test_help_lists_the_commands() -> None:
    done = run_certlab("--help")
    assert done.returncode == 0
    for command in ("certify", "regrade", "plugins", "demo", "compare"):
        assert command in done.stdout


def test_no_arguments_shows_help() -> None:
    done = run_certlab()
    assert "Usage" in done.stdout + done.stderr
