"""What the real CLI adapters share: each reads its CLI's version as preflight does, for the bundle and the manifest."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from certlab_core._runtime.registry import discover


def _program(tmp_path: Path, prints: str) -> str:
    path = tmp_path / "cli"
    path.write_text(f"#!/bin/sh\necho '{prints}'\n", encoding="utf-8")
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize(
    ("adapter", "prints", "version"),
    [
        ("claude-code", "2.1.197 (Claude Code)", "2.1.197"),
        ("codex", "codex-cli 0.171.0", "0.171.0"),
        ("aider", "aider 0.86.2", "0.86.2"),
    ],
)
def test_each_real_adapter_reads_its_clis_version(tmp_path: Path, adapter: str, prints: str, version: str) -> None:
    record = discover(only=[adapter]).get("agents", adapter)
    assert record.version is not None
    assert record.version((f"--bin={_program(tmp_path, prints)}",), os.environ) == version
    # No version number printed, or no CLI at all: the adapter cannot tell, and says nothing.
    assert record.version((f"--bin={_program(tmp_path, 'usage: cli [options]')}",), os.environ) is None
    assert record.version(("--bin=/nonexistent/cli",), os.environ) is None


@pytest.mark.parametrize("adapter", ["claude-code", "codex", "aider"])
def test_each_real_adapter_names_its_program_for_the_check_inside_the_sandbox(tmp_path: Path, adapter: str) -> None:
    record = discover(only=[adapter]).get("agents", adapter)
    assert record.programs is not None
    program = _program(tmp_path, "1.0.0")
    assert list(record.programs((f"--bin={program}",))) == [program]
    assert list(record.programs(("--bin=/nonexistent/cli",))) == []  # the run itself says it is unavailable
