"""The demo's certification chapter from a checkout: its script agent is reached through a link into it."""

from __future__ import annotations

from pathlib import Path

from certlab_demo import chapter_certify as demo_certify
from certlab_demo.tour import DemoContext


def test_the_script_agent_certifies_from_a_checkout_where_its_file_is_a_link(tmp_path: Path) -> None:
    # In a checkout the shipped example is a link to the repository's examples/ folder, and both lie in the
    # checkout that the sandbox hides: the step failed there (exit 3, "hidden from the agent") wherever bwrap runs,
    # so make demo stopped at its second step. From a wheel the file is a copy (tests/test_dist.py runs that demo).
    context = DemoContext(workdir=tmp_path)
    (step,) = [s for s in demo_certify.steps(context) if s.key == "cert-pattern-fixer"]
    assert step.run(context) == "a shell-script agent fixed 2/6; the contract names each failure"
