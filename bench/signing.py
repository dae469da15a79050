"""Time signing and verifying a large run store, and the read a resumed run makes of what is already recorded.

A store of ``--trials`` sealed lines is built as bench/store.py builds its stores (a real
retry-world run's lines copied to many indices, re-keyed and resealed), beside its manifest and
a decision, in a scratch folder; then, each in this process and timed with ``time.perf_counter``:

- ``sign_folder`` (hash every file, sign the Statement) and ``verify_folder`` (check the
  signature, hash every file again), the work ``--sign-key`` and ``certlab verify`` add;
- ``recorded_trials`` (every line parsed and its seal checked), the work ``certlab run --resume``
  does before it runs the missing trials;
- ``cut_torn_tail`` on a store whose last line is torn.

    .venv/bin/python bench/signing.py [--trials 100000]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=100_000)
    trials = parser.parse_args().trials

    from certlab_signing import evidence
    from store import build_store, template_run

    from certlab_core.evidence.record_file import cut_torn_tail
    from certlab_core.gate.manifest import read_manifest
    from certlab_core.gate.resume import recorded_trials
    from certlab_core.gate.store import DECISION, MANIFEST, TRIALS, seal_line

    with tempfile.TemporaryDirectory(prefix="certlab-bench-signing-") as scratch:
        root = Path(scratch)
        store = build_store(root / "store", trials, template_run(root / "template"), with_usage=False)
        (store / DECISION).write_text("{}\n")
        size_mb = (store / TRIALS).stat().st_size / 1e6
        private_key, public_key = evidence.generate_key_pair(root / "bench")

        started = time.perf_counter()
        signed = evidence.sign_folder(store, private_key)
        sign_s = time.perf_counter() - started
        started = time.perf_counter()
        evidence.verify_folder(store, public_key)
        verify_s = time.perf_counter() - started
        started = time.perf_counter()
        recorded = recorded_trials(store / TRIALS, read_manifest(store / MANIFEST))
        resume_s = time.perf_counter() - started
        last = (store / TRIALS).read_text().rsplit("\n", 2)[-2]
        with (store / TRIALS).open("a") as handle:
            handle.write(seal_line(json.loads(last))[:200])
        started = time.perf_counter()
        cut = cut_torn_tail(store / TRIALS)
        cut_s = time.perf_counter() - started

    print(f"store: {len(recorded)} trials, {size_mb:.1f} MB; {signed.subjects} files signed")
    print(f"sign (hash every file, sign the Statement): {sign_s:.3f} s")
    print(f"verify (signature, every file hashed again): {verify_s:.3f} s")
    print(f"resume's read of what is recorded (every line checked as certlab gate checks it): {resume_s:.3f} s")
    print(f"cut a torn last line ({cut} bytes): {cut_s * 1000:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
