"""A coding run's trials are graded on warm grading servers in their sandbox, as certify's are."""

from __future__ import annotations

from pathlib import Path

import attrs
from gate_helpers import descriptor, lines, local_session, write

from certlab_core._runtime.registry import Registry
from certlab_core.gate.descriptor import load_descriptor
from certlab_core.gate.manifest import build_manifest, seal_manifest
from certlab_core.gate.progress import ProgressLine
from certlab_core.gate.runner import plan_run, run_experiment
from certlab_core.gate.store import create_run


class ServersSeen(ProgressLine):
    """A progress line that notes how many suite grading servers are up as each trial comes back."""

    def __init__(self, total: int) -> None:
        super().__init__(total, enabled=False)
        self.seen: list[int] = []

    def update(self, done: int, failed: int, errors: int) -> None:
        from certlab_suite import plugin as suite

        self.seen.append(len(suite._servers))
        super().update(done, failed, errors)


def test_a_coding_runs_trials_are_graded_on_warm_servers_in_the_sandbox(registry: Registry, tmp_path: Path) -> None:
    # Each trial's grading started a sandbox and a test runner of its own, where certify's fork from warm servers:
    # examples/impossible/honesty.yaml (48 trials, bwrap) took 18.2 to 18.4 CPU-s, against 5.5 to 6.5 with its gradings
    # served (bench/coding_run.py).
    from certlab_suite import plugin as suite

    coding = descriptor(
        task={"family": "intervals", "defects": ["length-counts-end", "clamp-to-end"]},
        oracle="graders",
        arms={"baseline": {"adapter": "oracle"}, "candidate": {"adapter": "null"}},
        conditions=[{"name": "clean", "bucket": "benign"}],
        n_per_arm=2,
        budgets={"seconds": 30},
    )
    path = write(tmp_path, coding)
    manifest = build_manifest(load_descriptor(path), path, registry)
    manifest = seal_manifest(attrs.evolve(manifest, sandbox="bwrap"))
    folder = create_run(tmp_path / "runs", manifest)
    progress = ServersSeen(4)
    with local_session(2) as session:
        run_experiment(plan_run(manifest, registry), folder, session, progress=progress)
    assert sorted((x["arm"], x["outcome"]) for x in lines(folder)) == [
        ("baseline", "success"),
        ("baseline", "success"),
        ("candidate", "failure"),
        ("candidate", "failure"),
    ]
    assert len(progress.seen) == 4 and min(progress.seen) >= 1, progress.seen
    assert suite._servers == []  # and none is left once the run is done
