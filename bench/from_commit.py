"""Benchmark: wall time of building a task from a bug-fix commit of the shipped project (parse), checks included.

Clones the test data's bundle (``graders/acceptance/tests/data/parse``) once, then builds the
task of commit b1d2121 with the real CLI (``certlab task from-commit``), its four offline pytest
runs under the sandbox included, ``--repeat`` times into new folders, and prints the median.
Then it certifies the null agent on the task once, on the three tasks of the shipped project's
three bug fixes together once, and on the intervals family once, and prints each, with the cost
of one task against one intervals task (the family's certification divided by its six tasks):
CPU seconds (the command and every process it waited for) and wall time. Targets: a build at
most 60 s; a certification on the task at most twice one on a built-in family task.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from measured import children_cpu_s

REPO = Path(__file__).resolve().parent.parent
BUNDLE = REPO / "graders" / "acceptance" / "tests" / "data" / "parse" / "parse.bundle"
COMMIT = "b1d2121902a0d3a2e3a58758d24dad1ead9a3c61"
#: The other two bug fixes of the test data (its README): a certification on all three tasks at once.
OTHER_COMMITS = ("9c9ec7fe886c195a369446ec5f2a57930b627f8a", "35b9ffb355f94bc4cb781fbb3b0adff2232a5602")
BUILD_TARGET_S = 60.0
FIRST_DEFECT = "length-counts-end"  # the intervals task the like-with-like figure certifies


def certlab(*args: str) -> float:
    return certlab_timed(*args)[0]


def certlab_timed(*args: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the command and every process it waited for)."""
    started, cpu = time.perf_counter(), children_cpu_s()
    done = subprocess.run([sys.executable, "-m", "certlab_core.cli", *args], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"bench: certlab {args[0]} failed: {done.stderr.strip()[-400:]}")
    return time.perf_counter() - started, children_cpu_s() - cpu


def intervals_task(folder: Path) -> Path:
    """The intervals family's first seeded defect written out as a user task: its seeded tree the fixture, its
    tests, prompt and held-out cases, and its clean tree the oracle (as a commit's task has its fix)."""
    from certlab_core.sdk.services import installed_plugins
    from certlab_core.sdk.workcopy import materialise

    family = installed_plugins().get("task_families", "intervals")
    defect = next(d for d in family.defects if d.id == FIRST_DEFECT)
    materialise(family, defect, folder / "fixture")
    materialise(family, None, folder / "oracle")
    (folder / "fixture" / "tests").rename(folder / "tests")  # the visible tests sit beside the fixture
    shutil.rmtree(folder / "oracle" / "tests")  # the oracle is the fixed code alone, as a commit's fix is
    (folder / "cases").mkdir()
    shutil.copyfile(family.cases_file, folder / "cases" / "acceptance.jsonl")
    shutil.copyfile(family.prompt_file, folder / "PROMPT.md")
    modules = ", ".join(f'"{m}"' for m in family.module_names)
    allowed = ", ".join(f'"{p}"' for p in family.allowed_paths)
    (folder / "certlab.yaml").write_text(
        f"task:\n  name: intervals-{FIRST_DEFECT}\n  fixture: fixture\n  tests: tests\n  prompt: PROMPT.md\n"
        f"  cases: cases/acceptance.jsonl\n  allowed_paths: [{allowed}]\n  modules: [{modules}]\n  oracle: oracle\n"
    )
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3, help="builds to take the median of")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="certlab-bench-commit-") as scratch:
        root = Path(scratch)
        clone = root / "parse"
        subprocess.run(["git", "clone", "-q", str(BUNDLE), str(clone)], check=True)
        builds = [
            certlab("task", "from-commit", str(clone), COMMIT, "--out", str(root / f"task-{n}"))
            for n in range(arguments.repeat)
        ]
        build = statistics.median(builds)
        print(f"from-commit: median {build:.1f} s over {len(builds)} builds (target <= {BUILD_TARGET_S:g} s)")
        task = root / "task-0"
        certlab("lock", str(task))
        others = [root / f"task-{commit[:7]}" for commit in OTHER_COMMITS]
        for commit, folder in zip(OTHER_COMMITS, others, strict=True):
            certlab("task", "from-commit", str(clone), commit, "--out", str(folder))
            certlab("lock", str(folder))
        three = [arg for folder in (task, *others) for arg in ("--task", str(folder))]
        on_family, family_cpu = certlab_timed(
            "certify", "--family", "intervals", "--agent", "null", "--out", str(root / "f")
        )
        on_task, task_cpu = certlab_timed("certify", "--task", str(task), "--agent", "null", "--out", str(root / "t"))
        on_three, three_cpu = certlab_timed("certify", *three, "--agent", "null", "--out", str(root / "t3"))
        tasks = len(json.loads((root / "f" / "bundle.json").read_text())["trials"])
        per_wall, per_cpu = on_family / tasks, family_cpu / tasks
        print(
            f"certify null: {on_task:.1f} s ({task_cpu:.1f} CPU-s) on the task, {on_three:.1f} s "
            f"({three_cpu:.1f} CPU-s) on the project's 3 tasks, {on_family:.1f} s ({family_cpu:.1f} CPU-s) on "
            f"the intervals family's {tasks} tasks"
        )
        print(
            f"one task against one intervals task: {task_cpu / per_cpu:.2f}x CPU, {on_task / per_wall:.2f}x wall "
            f"(target <= 2x); per task of the three: {three_cpu / 3 / per_cpu:.2f}x CPU, "
            f"{on_three / 3 / per_wall:.2f}x wall; load average {os.getloadavg()[0]:.1f}"
        )
        # Like with like: one certification of one task each, the intervals task written out as a user task.
        alone = intervals_task(root / "intervals-task")
        certlab("lock", str(alone))
        on_alone, alone_cpu = certlab_timed(
            "certify", "--task", str(alone), "--agent", "null", "--out", str(root / "a")
        )
        print(
            f"one certification of one task each: {on_task:.1f} s ({task_cpu:.1f} CPU-s) on the commit's task, "
            f"{on_alone:.1f} s ({alone_cpu:.1f} CPU-s) on intervals' {FIRST_DEFECT} as a user task: "
            f"{task_cpu / alone_cpu:.2f}x CPU, {on_task / on_alone:.2f}x wall (target <= 2x)"
        )
    if build > BUILD_TARGET_S:
        sys.exit(f"bench: a build took {build:.1f} s, past {BUILD_TARGET_S:g} s")


if __name__ == "__main__":
    main()
