"""certify fails a trial whose changes hold over half of the held-out answers: ``answers-leaked``.

The measured failure: an agent that fixed the defect and left the held-out cases in the work copy
(read from the installed family, uncontained) was certified ``fixed`` while ``certlab leakscan`` said LEAK.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from certlab_acceptance.cases import read_cases
from certlab_acceptance.leakscan import leaked_by_changes

from certlab_core._runtime.registry import Registry
from certlab_core.certify.lab import Task, TrialSpec, run_trial
from certlab_core.plugin.types.grader import Change
from certlab_core.sdk.forking import call_in_fork
from certlab_core.sdk.grading import grader_chain


def trial(registry: Registry, tmp_path: Path, script: str) -> tuple[str, str | None]:
    family = registry.get("task_families", "intervals")
    agent = tmp_path / "agent.sh"
    agent.write_text("#!/bin/sh\n" + script + "\n")
    agent.chmod(0o755)
    spec = TrialSpec(
        Task(family, family.defects[0]),
        registry.get("agents", "command"),
        1,
        agent_args=("/bin/sh", str(agent)),
        agent_timeout_s=10,
    )
    record = call_in_fork(run_trial, spec, grader_chain(registry))
    return record.verdict, record.failure_mode


def test_a_fix_that_also_holds_the_held_out_answers_is_answers_leaked(registry: Registry, tmp_path: Path) -> None:
    family = registry.get("task_families", "intervals")
    clean = Path(family.tree_dir) / "intervals.py"
    leak = f"cp {clean} intervals.py && sed 's/^/# /' {family.cases_file} >> intervals.py"
    assert trial(registry, tmp_path, leak) == ("not-fixed", "answers-leaked")
    # The same fix without the answers is fixed: the mode names the leak, not the fix.
    assert trial(registry, tmp_path, f"cp {clean} intervals.py") == ("fixed", None)


def change(path: str, text: str) -> Change:
    return Change(path, "added", None, base64.b64encode(text.encode()).decode())


def test_half_of_the_answers_or_fewer_is_no_leak_and_a_symlink_holds_none(registry: Registry) -> None:
    cases = read_cases(Path(registry.get("task_families", "intervals").cases_file))
    lines = [
        json.dumps({"id": c.id, "args": list(c.args), **({"raises": c.raises} if c.raises else {"expect": c.expect})})
        for c in cases
    ]
    half = len(cases) // 2
    assert leaked_by_changes([change("a.py", "\n".join(lines[:half]))], cases) is None
    # Split over two files, the answers still count together.
    found = leaked_by_changes([change("a.py", "\n".join(lines[:half])), change("b.py", lines[half])], cases)
    assert found is not None and found.found == half + 1
    as_link = Change("a.py", "symlink", None, base64.b64encode("\n".join(lines).encode()).decode())
    assert leaked_by_changes([as_link], cases) is None
