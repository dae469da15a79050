"""Time ``make demo`` from a fresh clone, setup included, against the 90 s target (issue 16).

Each repeat clones this checkout's HEAD (committed work only) into a new temporary folder and
runs ``make demo`` there, as a user does: the setup (a venv, pip and setuptools, our
distributions and their dependencies, from the package index as pip is configured here,
with its cache as it is) and then ``certlab demo``. The setup's time is the time until the
demo prints its first line (``demo: N steps``), the demo's the rest; their sum is the total
held against the target. CPU seconds are ``make``'s and every process under it; the demo's
own CPU is what it prints on its last line (the commands it ran), the setup's the rest.
With ``--repeat N`` each repeat is printed and then the medians. The load average is
printed beside every figure: the wall times of a shared machine are indications.

``--cold-cache`` gives the demo an empty certlab cache (``CERTLAB_CACHE_DIR``), so the
certifications measure their mutation proofs instead of reusing this machine's.

    python3 bench/demo.py [--repeat 3] [--rev OLD --rev HEAD] [--jobs N] [--cold-cache] [--keep DIR]

With two ``--rev`` the runs alternate (OLD, HEAD, OLD, ...), so a before/after ratio shares the load.

Exit 0 when the (last revision's) median total is within the target, 1 when it is not, 2 when ``make demo`` failed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from measured import children_cpu_s

REPO = Path(__file__).resolve().parent.parent
TARGET_S = 90.0
FINAL = re.compile(r"^demo: all (\d+) steps held \(([\d.]+) s(?:, ([\d.]+) CPU-s)?\)$")


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "?"


def one_run(folder: Path, rev: str, jobs: int | None, cold_cache: bool) -> dict[str, float | str]:
    """Clone ``rev`` into ``folder``, run ``make demo`` there; the setup, demo and total wall and CPU seconds."""
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(folder)], check=True)
    subprocess.run(["git", "-C", str(folder), "checkout", "-q", "--detach", rev], check=True)
    env = dict(os.environ)
    for variable in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE"):
        env.pop(variable, None)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if "/.venv/" not in p + "/")
    if cold_cache:
        env["CERTLAB_CACHE_DIR"] = str(folder.parent / "certlab-cache")
    command = ["make", "demo"] + ([f"DEMO_JOBS={jobs}"] if jobs else [])
    load_before = load()
    cpu_before = children_cpu_s()
    started = time.monotonic()
    first: float | None = None
    lines: list[str] = []
    with subprocess.Popen(
        command, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as make:
        assert make.stdout is not None
        for line in make.stdout:
            lines.append(line.rstrip("\n"))
            if first is None and line.startswith("demo: ") and " steps, " in line:
                first = time.monotonic()
    ended = time.monotonic()
    cpu = children_cpu_s() - cpu_before
    final = next((FINAL.match(line) for line in reversed(lines) if FINAL.match(line)), None)
    if make.returncode != 0 or first is None or final is None:
        tail = "\n".join(lines[-15:])
        raise RuntimeError(f"make demo exited {make.returncode} in {folder}:\n{tail}")
    demo_cpu = float(final.group(3)) if final.group(3) else float("nan")  # older demos print no CPU
    return {
        "setup_s": first - started,
        "demo_s": ended - first,
        "total_s": ended - started,
        "cpu_s": cpu,
        "setup_cpu_s": cpu - demo_cpu,
        "demo_cpu_s": demo_cpu,
        "steps": final.group(1),
        "load_before": load_before,
        "load_after": load(),
    }


def show(label: str, run: dict[str, float | str]) -> None:
    print(
        f"{label}: setup {run['setup_s']:.1f} s ({run['setup_cpu_s']:.1f} CPU-s), demo {run['demo_s']:.1f} s "
        f"({run['demo_cpu_s']:.1f} CPU-s), total {run['total_s']:.1f} s ({run['cpu_s']:.1f} CPU-s) "
        f"against {TARGET_S:.0f} s; load {run['load_before']} before, {run['load_after']} after",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="clone and run this many times (medians printed)")
    parser.add_argument("--jobs", type=int, default=None, help="certlab demo --jobs (default: the demo's own)")
    parser.add_argument("--cold-cache", action="store_true", help="an empty certlab cache for the demo")
    parser.add_argument(
        "--rev",
        action="append",
        default=None,
        help="clone this revision (default HEAD); given more than once, the revisions alternate in each repeat",
    )
    parser.add_argument("--keep", type=Path, default=None, help="clone into this folder and keep the clones")
    args = parser.parse_args()
    if args.repeat < 1 or (args.jobs is not None and args.jobs < 1):
        print("bench/demo.py: --repeat and --jobs must be at least 1", file=sys.stderr)
        return 2
    if shutil.which("make") is None or shutil.which("git") is None:
        print("bench/demo.py: needs make and git on PATH", file=sys.stderr)
        return 2
    revs = args.rev or ["HEAD"]
    names = {}
    for rev in revs:
        found = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", rev], capture_output=True, text=True)
        if found.returncode != 0:
            print(f"bench/demo.py: --rev {rev}: not a revision of {REPO}", file=sys.stderr)
            return 2
        names[rev] = found.stdout.strip()
    shown = ", ".join(names.values())
    print(f"bench/demo.py: make demo from a fresh clone of {shown}, {args.repeat} time(s) each", flush=True)
    root = args.keep or Path(tempfile.mkdtemp(prefix="certlab-bench-demo-"))
    runs: dict[str, list[dict[str, float | str]]] = {rev: [] for rev in revs}
    try:
        for number in range(1, args.repeat + 1):
            for rev in revs:
                folder = root / f"clone-{names[rev]}-{number}"
                try:
                    run = one_run(folder, names[rev], args.jobs, args.cold_cache)
                except (RuntimeError, subprocess.CalledProcessError) as failure:
                    print(f"bench/demo.py: {failure}", file=sys.stderr)
                    return 2
                runs[rev].append(run)
                show(f"{names[rev]} run {number}", run)
                if args.keep is None:
                    shutil.rmtree(folder, ignore_errors=True)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    keys = ("setup_s", "demo_s", "total_s", "cpu_s", "setup_cpu_s", "demo_cpu_s")
    within = {}
    for rev in revs:
        median = {key: statistics.median(float(r[key]) for r in runs[rev]) for key in keys}
        loads = ", ".join(f"{r['load_before']}" for r in runs[rev])
        show(f"{names[rev]} median of {len(runs[rev])}", {**median, "load_before": loads, "load_after": load()})
        within[rev] = median["total_s"] <= TARGET_S
        print(f"{names[rev]}: {'within' if within[rev] else 'over'} the {TARGET_S:.0f} s target", flush=True)
    return 0 if within[revs[-1]] else 1  # the last revision's verdict (HEAD's when none is given)


if __name__ == "__main__":
    raise SystemExit(main())
