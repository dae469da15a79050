"""The published-certification story: the dispatchable certify workflow and REPLAY_REQUEST.md say only what runs.

The workflow is checked against the GitHub workflow schema offline (check-jsonschema's
vendored copy); every ``certlab`` command the workflow or the replay request names must be
a command the CLI registers.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from certlab_core._runtime.registry import discover
from certlab_core.cli import COMMAND_MODULES
from certlab_core.plugin import Command

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "certify.yml"
REPLAY_REQUEST = ROOT / "REPLAY_REQUEST.md"
# The kernel's commands and every installed plugin's (replay is certlab-diagnosis's).
COMMANDS = {name for names in COMMAND_MODULES.values() for name in names} | set(discover().names(Command))


def _check_jsonschema() -> list[str]:
    found = shutil.which("check-jsonschema", path=str(Path(sys.executable).parent)) or shutil.which("check-jsonschema")
    assert found, "check-jsonschema is not installed (requirements-dev.txt installs it)"
    return [found]


def test_the_workflow_is_valid_against_the_github_workflow_schema() -> None:
    result = subprocess.run(
        [*_check_jsonschema(), "--builtin-schema", "vendor.github-workflows", str(WORKFLOW)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_schema_check_refuses_a_broken_workflow(tmp_path: Path) -> None:
    broken = tmp_path / "certify.yml"
    broken.write_text(WORKFLOW.read_text().replace("runs-on: ubuntu-latest", "runs-on: [ubuntu-latest]\n    stepz: 1"))
    result = subprocess.run(
        [*_check_jsonschema(), "--builtin-schema", "vendor.github-workflows", str(broken)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1


def test_the_workflow_takes_agent_and_family_calibrates_first_and_uploads_the_bundle() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    trigger = workflow[True] if True in workflow else workflow["on"]  # YAML 1.1 reads the key `on` as True
    inputs = trigger["workflow_dispatch"]["inputs"]
    assert {"agent", "family"} <= set(inputs)
    steps = workflow["jobs"]["certify"]["steps"]
    names = [step.get("name", step.get("uses", "")) for step in steps]
    calibrate = next(i for i, n in enumerate(names) if n.startswith("Calibrate"))
    certify = next(i for i, n in enumerate(names) if n.startswith("Certify"))
    upload = next(i for i, s in enumerate(steps) if str(s.get("uses", "")).startswith("actions/upload-artifact"))
    assert calibrate < certify < upload
    assert "--agent oracle" in steps[calibrate]["run"] and "--agent null" in steps[calibrate]["run"]
    assert steps[upload]["if"] == "always()"


def _commands_in(text: str) -> set[str]:
    return set(re.findall(r"(?:bin/|`)certlab ([a-z][a-z-]*)", text))


def test_every_certlab_command_named_exists() -> None:
    named = _commands_in(WORKFLOW.read_text()) | _commands_in(REPLAY_REQUEST.read_text())
    assert {"certify", "regrade", "verify"} <= named
    assert named - COMMANDS == set(), f"not a certlab command: {sorted(named - COMMANDS)}"
