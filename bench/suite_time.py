"""Time ``make test`` from a fresh clone: the whole run, pytest's share and CPU (issue 24's figure).

Each repeat clones a revision (committed work only) into a new temporary folder and runs ``make
test`` there as CI does (``CI=true``), with pytest writing a JUnit file beside the clone. It
prints, per run: the whole run's wall seconds, pytest's own (its summary line), the CPU seconds
of ``make`` and every process under it, the tests passed, and the modules that took longest
(summed test time, every xdist worker's). With two ``--rev`` the runs alternate (OLD, HEAD,
OLD, ...), so a before/after ratio shares the machine's load; the load average is printed.

Each run gets a measurement cache of its own (``CERTLAB_CACHE_DIR`` in its folder, removed with
it) unless ``--warm-measurements``: it proves, calibrates and measures mutants as a fresh
machine's first run does, and the user's own cache is never touched. pip's and the agent CLIs'
caches are this machine's, as the issue's figure allows.

    python3 bench/suite_time.py [--repeat 2] [--rev OLD --rev HEAD] [--top 15] [--keep NEW_DIR]

Target (issue 24): ``make test`` at most 600 s, pytest's share at most 480 s, the median of 2.
Exit 0 when every run passed, 1 when a run's ``make test`` failed (its tail printed), 2 on a
setup error.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from fresh_clone import clone_at, run_folders  # bench/fresh_clone.py, beside this script
from measured import children_cpu_s

SUMMARY = re.compile(r"(\d+) passed.* in ([0-9.]+)s")


@dataclass(frozen=True)
class Figures:
    """One ``make test`` run: wall and CPU seconds of the whole, pytest's own seconds, and what it printed."""

    wall_s: float
    cpu_s: float
    exit_code: int
    passed: int
    pytest_s: float  # NaN when pytest printed no summary line (make failed before or during it)
    modules: Counter[str]
    tail: str


def module_times(junit: Path) -> Counter[str]:
    """Summed test time per test module (classname without the class), from pytest's JUnit file."""
    times: Counter[str] = Counter()
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        module = case.get("classname", "?")
        parts = module.split(".")
        if len(parts) > 1 and parts[-1][:1].isupper():  # a test class: count it with its module
            module = ".".join(parts[:-1])
        times[module] += float(case.get("time", 0.0))
    return times


def one_run(rev: str, folder: Path, warm_measurements: bool) -> Figures:
    """Clone ``rev`` into ``folder/clone``, run ``make test`` there; its figures."""
    clone, junit, log = folder / "clone", folder / "junit.xml", folder / "make-test.log"
    clone_at(rev, clone)
    env = {**os.environ, "CI": "true", "PYTEST_ADDOPTS": f"--junitxml={junit}"}
    if not warm_measurements:
        env["CERTLAB_CACHE_DIR"] = str(folder / "measurements")
    wall, cpu = time.monotonic(), children_cpu_s()
    with log.open("w", encoding="utf-8") as out:
        code = subprocess.run(["make", "test"], cwd=clone, stdout=out, stderr=subprocess.STDOUT, env=env).returncode
    wall, cpu = time.monotonic() - wall, children_cpu_s() - cpu
    text = log.read_text(encoding="utf-8", errors="replace")
    found = SUMMARY.findall(text)
    passed, pytest_s = (int(found[-1][0]), float(found[-1][1])) if found else (0, float("nan"))
    modules = module_times(junit) if junit.exists() else Counter()
    return Figures(wall, cpu, code, passed, pytest_s, modules, text[-3000:])


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="clone and run this many times per revision")
    parser.add_argument("--rev", action="append", default=None, help="a revision to time (twice: alternate)")
    parser.add_argument("--top", type=int, default=15, help="print this many of the longest modules per run")
    parser.add_argument(
        "--warm-measurements", action="store_true", help="use certlab's own measurement cache, as it is"
    )
    parser.add_argument("--keep", type=Path, default=None, help="clone into this new folder and keep the clones")
    args = parser.parse_args()
    if shutil.which("make") is None or shutil.which("git") is None:
        print("bench/suite_time.py: needs make and git on PATH", file=sys.stderr)
        return 2
    revs = args.rev or ["HEAD"]
    results: dict[str, list[Figures]] = {rev: [] for rev in revs}
    failed = False
    try:
        with contextlib.closing(run_folders(revs, args.repeat, args.keep, "certlab-bench-suite-")) as runs:
            for rev, folder in runs:
                folder.mkdir(parents=True)
                figures = one_run(rev, folder, args.warm_measurements)
                results[rev].append(figures)
                print(
                    f"{rev}: make test {figures.wall_s:.1f} s, pytest {figures.pytest_s:.1f} s, "
                    f"{figures.cpu_s:.0f} CPU-s, {figures.passed} passed, exit {figures.exit_code}; "
                    f"load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
                for module, seconds in figures.modules.most_common(args.top):
                    print(f"    {seconds:7.1f} s  {module}")
                if figures.exit_code != 0:
                    failed = True
                    print(f"bench/suite_time.py: make test failed at {rev}:\n{figures.tail}", file=sys.stderr)
    except (RuntimeError, FileExistsError) as error:
        print(f"bench/suite_time.py: {error}", file=sys.stderr)
        return 2
    for rev, runs in results.items():
        wall = statistics.median(r.wall_s for r in runs)
        pytest_s = statistics.median(r.pytest_s for r in runs)
        cpu = statistics.median(r.cpu_s for r in runs)
        print(f"median of {len(runs)}, {rev}: make test {wall:.1f} s, pytest {pytest_s:.1f} s, {cpu:.0f} CPU-s")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
