"""The rules load numpy and scipy.special with their BLAS at one thread, and leave the environment as it was."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# In a fresh interpreter: a rule's arithmetic, then the threads this process runs and what its environment says.
AFTER_A_RULE = """
import json, os
from certlab_clopper_pearson.rule import limits
from certlab_newcombe.rule import bounds_grid
limits([3], [10], 0.05)
bounds_grid([3], [10], [5], [10], 0.05)
with open("/proc/self/status") as status:
    threads = int(status.read().split("Threads:")[1].split()[0])
print(json.dumps({"threads": threads, "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS")}))
"""


def after_a_rule(**env: str) -> dict[str, object]:
    clean = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    done = subprocess.run(
        [sys.executable, "-c", AFTER_A_RULE], capture_output=True, text=True, env={**clean, **env}, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    said: dict[str, object] = json.loads(done.stdout)
    return said


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: OpenBLAS starts no thread of its own")
def test_a_rules_arithmetic_starts_no_blas_thread_and_leaves_no_setting_behind() -> None:
    # numpy's and scipy's OpenBLAS each started a thread per CPU, spinning as they started (0.2 CPU s a command).
    assert after_a_rule() == {"threads": 1, "blas_threads": None}


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: OpenBLAS starts no thread of its own")
def test_a_thread_count_the_user_set_holds() -> None:
    said = after_a_rule(OPENBLAS_NUM_THREADS="2")
    assert said["blas_threads"] == "2"
    assert isinstance(said["threads"], int) and said["threads"] > 1
