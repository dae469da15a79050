"""Re-run every published certification listed in certifications/runs.yaml and regenerate the record.

Used by `make certifications` after a deliberate change to a family or grader made the
committed bundles stale; the commit that follows says why. A run with ``mutants: true`` also
records each family's mutation proof (``certlab certify --mutants``). ``--run NAME``
(repeatable) re-runs only those runs; the record is regenerated from every bundle either way.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
ROOT = Path("certifications")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--run", action="append", default=[], help="re-run only this run (repeatable)")
    only = set(parser.parse_args().run)
    os.chdir(REPO)
    runs = yaml.safe_load((ROOT / "runs.yaml").read_text())["runs"]
    unknown = only - {run["run"] for run in runs}
    if unknown:
        print(f"publish: no run named {', '.join(sorted(unknown))} in runs.yaml", file=sys.stderr)
        return 4
    env = dict(os.environ, CERTLAB_EXAMPLES=str(REPO / "examples"))
    for run in runs:
        if only and run["run"] not in only:
            continue
        out = ROOT / run["run"]
        if out.exists():
            shutil.rmtree(out)
        argv = [sys.executable, "-m", "certlab_core.cli", "certify", "--agent", run["agent"], "--out", str(out), "-q"]
        for family in run["families"]:
            argv += ["--family", family]
        for arg in run.get("agent_args", []):
            argv += ["--agent-arg", arg]
        if "agent_name" in run:
            argv += ["--agent-name", run["agent_name"]]
        if "agent_version" in run:
            argv += ["--agent-version", str(run["agent_version"])]
        argv += ["--trials", str(run.get("trials", 1)), "--origin-note", run.get("note", "")]
        if run.get("mutants"):
            argv.append("--mutants")
        print(f"publish: {run['run']}", flush=True)
        done = subprocess.run(argv, env=env, check=False)
        if done.returncode != 0:
            print(f"publish: {run['run']} exited {done.returncode}", file=sys.stderr)
            return done.returncode
    return subprocess.run([sys.executable, "-m", "certlab_core.cli", "compare", str(ROOT)], check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
