"""What the hardened readers cost: the store's line reader and the JSON loader, against the same work unguarded.

``certlab_core.sdk.safe_io`` opens every file with ``O_NONBLOCK`` and checks it is regular, caps a
line or a document at 16 MB and a document's nesting at 200 levels. This measures, in one
process and alternating, the CPU time of:

- reading every line of a store through ``certlab_core.gate.store.iter_raw_line_bytes`` (the
  memory-mapped reader ``report`` and ``gate`` use), against a bare loop over the same memory
  map with no regular-file check and no line cap;
- loading a certification bundle through ``certlab_core.sdk.safe_io.load_json``, against
  ``json.loads`` of the file's text.

The store is built as bench/store.py builds it (real retry-world lines, re-keyed and
resealed), unless ``--store`` names an existing trials.jsonl.

    .venv/bin/python bench/readers.py [--trials 100000] [--store PATH] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import mmap
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from certlab_core.gate.store import iter_raw_line_bytes
from certlab_core.sdk.safe_io import load_json

REPO = Path(__file__).resolve().parent.parent
BUNDLE = REPO / "certifications" / "oracle-all" / "bundle.json"


def bare_lines(path: Path) -> Iterator[bytes]:
    """The same split on newlines over a memory map, with no check of the file and no cap on a line."""
    with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
        position, size = 0, len(view)
        while position < size:
            newline = view.find(b"\n", position)
            if newline < 0:
                yield view[position:]
                return
            yield view[position:newline]
            position = newline + 1


def cpu_of(work: Callable[[], object]) -> float:
    started = time.process_time()
    work()
    return time.process_time() - started


def count(lines: Iterator[bytes]) -> int:
    return sum(1 for _ in lines)


def measure(path: Path, repeat: int) -> None:
    lines = count(bare_lines(path))
    guarded: list[float] = []
    bare: list[float] = []
    for _ in range(repeat):
        bare.append(cpu_of(lambda: count(bare_lines(path))))
        guarded.append(cpu_of(lambda: count(iter_raw_line_bytes(path))))
    size_mb = path.stat().st_size / 1e6
    print(
        f"store lines ({lines} lines, {size_mb:.0f} MB): "
        f"hardened reader median {statistics.median(guarded):.3f} s CPU, "
        f"bare loop {statistics.median(bare):.3f} s CPU"
    )
    text = BUNDLE.read_text(encoding="utf-8")
    loads = [cpu_of(lambda: json.loads(BUNDLE.read_text(encoding="utf-8"))) for _ in range(repeat)]
    hardened = [cpu_of(lambda: load_json(BUNDLE, "certification bundle")) for _ in range(repeat)]
    print(
        f"bundle ({len(text) / 1e6:.1f} MB): safe_io.load_json median {statistics.median(hardened) * 1000:.1f} ms CPU, "
        f"json.loads {statistics.median(loads) * 1000:.1f} ms CPU"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100_000, help="trials in the built store (default 100000)")
    parser.add_argument("--store", type=Path, default=None, help="an existing trials.jsonl to read instead")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each reader (default 5)")
    options = parser.parse_args()
    if options.store is not None:
        measure(options.store, options.repeat)
        return 0
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import store as bench_store  # bench/store.py: the same store its figures come from

    with tempfile.TemporaryDirectory(prefix="certlab-bench-readers-") as scratch:
        base = Path(scratch)
        template = bench_store.template_run(base / "template")
        folder = base / "bench-store-run"
        bench_store.build_store(folder, options.trials, template, False)
        measure(folder / bench_store.TRIALS, options.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
