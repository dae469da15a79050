"""Re-run every published certification listed in certifications/runs.yaml and regenerate the record.

Used by `make certifications` after a deliberate change to a family or grader made the
committed bundles stale; the commit that follows says why. A run with ``mutants: true`` also
records each family's mutation proof (``certlab certify --mutants``). ``--run NAME``
(repeatable) re-runs only those runs; the record is regenerated from every bundle either way.
Every published run is then signed (``sign_published``: the key $CERTLAB_SIGNING_KEY names, or
a new pair); ``--sign-only`` signs the committed runs as they are, without re-running them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
ROOT = Path("certifications")
PUBLIC_KEY = ROOT / "certlab.pub"
SIGNING_KEY = "CERTLAB_SIGNING_KEY"  # names the private key that signs the published runs


def sign_published() -> int:
    """Sign every published run: with the private key $CERTLAB_SIGNING_KEY names, or with a new key pair.

    Either way certifications/certlab.pub becomes the signing key's public key (commit it when
    it changes); tests/test_certifications.py verifies every run with it. A new pair's private
    key is written to a fresh folder outside the checkout: it never enters the repository.
    """
    from certlab_signing import evidence

    named = os.environ.get(SIGNING_KEY)
    if named:
        private = Path(named).resolve()
        if private.is_relative_to(REPO):
            print(f"publish: ${SIGNING_KEY} is inside the checkout; keep the private key out of it", file=sys.stderr)
            return 4
    else:
        private, _public = evidence.generate_key_pair(Path(tempfile.mkdtemp(prefix="certlab-signing-")) / "certlab")
        print(
            f"publish: no ${SIGNING_KEY}, so a new key pair signs: keep its private key {private} out of the "
            f"repository (export {SIGNING_KEY}={private} to sign with it again) and commit the new {PUBLIC_KEY}",
            flush=True,
        )
    signer = evidence.load_signer(private)
    PUBLIC_KEY.write_text(json.dumps(evidence.public_key_document(signer.public_key), indent=2) + "\n")
    for folder in sorted(p for p in ROOT.iterdir() if (p / "bundle.json").is_file()):
        signed = evidence.sign_folder(folder, private)
        evidence.verify_folder(folder, PUBLIC_KEY)
        print(f"publish: signed {folder} ({signed.subjects} files, key {signed.keyid[:16]})", flush=True)
    return 0


def main() -> int:
    if sys.argv[1:] == ["--sign-only"]:  # sign the committed runs as they are, without re-running them
        os.chdir(REPO)
        return sign_published()
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
    signed = sign_published()
    if signed != 0:
        return signed
    return subprocess.run([sys.executable, "-m", "certlab_core.cli", "compare", str(ROOT)], check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
