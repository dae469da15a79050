"""The run store: manifest.json, trials.jsonl (append-only), decision.json.

The formats are documented in docs/run-store.md; this module writes and reads them.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import mmap
import os
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from attrs import frozen

from certlab_core.evidence.record_file import cut_torn_tail, lock_store, raise_if_interrupted, unlock_store
from certlab_core.gate.events import boundary_marks
from certlab_core.gate.manifest import Manifest, manifest_document, read_manifest
from certlab_core.plugin.errors import CertlabError, InstrumentError, UsageError
from certlab_core.sdk.canonical import pretty_json
from certlab_core.sdk.processes import keep_from_children, release_to_children
from certlab_core.sdk.safe_io import (
    MAX_DOCUMENT_BYTES,
    iter_capped_lines,
    line_too_long,
    load_json,
    opened_regular,
    replace_file,
)

MANIFEST = "manifest.json"
TRIALS = "trials.jsonl"
DECISION = "decision.json"
TRIAL_SCHEMA = "certlab.trial/1"
DECISION_SCHEMA = "certlab.decision/1"
_SEAL_FIELD = re.compile(r',"seal":"([0-9a-f]{64})"')


def _canonical_text(document: Mapping[str, Any]) -> str:
    # The canonical form of certlab_core.sdk.canonical, for plain JSON data (no records to unstructure): faster.
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


GATE_SUMMARY = "_gate"
GATE_PREFIX = '{"' + GATE_SUMMARY + '":'
BOUNDARY_MARKS = "_marks"  # the events' boundary marks; the key sorts right after ``_gate``
MARKS_KEY = ',"' + BOUNDARY_MARKS + '":'


def gate_summary(line: Mapping[str, Any]) -> dict[str, Any]:
    """What the gate reads of a trial line, derived from the line itself (see docs/run-store.md, ``_gate``)."""
    faults = line.get("faults")
    violations = line.get("contract_violations")
    upstream = line.get("upstream_errors")
    return {
        "attempt": line.get("attempt"),
        "error": line.get("error"),
        "failure_mode": line.get("failure_mode"),
        "fired": [bool(f.get("fired")) if isinstance(f, Mapping) else False for f in faults]
        if isinstance(faults, list)
        else [],
        "id": line.get("id"),
        "identity": line.get("identity"),
        "manifest_seal": line.get("manifest_seal"),
        "outcome": line.get("outcome"),
        "seed": line.get("seed"),
        "violations": len(violations) if isinstance(violations, list) else 0,
        **({"upstream_errors": len(upstream)} if isinstance(upstream, list) and upstream else {}),
    }


def seal_line(line: Mapping[str, Any]) -> str:
    """One trial line: canonical JSON with its ``_gate`` summary, its ``_marks`` and its seal, newline-terminated.

    ``line`` holds plain JSON data only; the summary and the marks are always recomputed from
    the line, so a line re-keyed and resealed here stays consistent.
    """
    document = dict(line)
    document.pop("seal", None)
    document.pop(GATE_SUMMARY, None)
    document.pop(BOUNDARY_MARKS, None)
    document[GATE_SUMMARY] = gate_summary(document)
    document[BOUNDARY_MARKS] = boundary_marks(document.get("events"))
    document["seal"] = hashlib.sha256(_canonical_text(document).encode("utf-8")).hexdigest()
    return _canonical_text(document) + "\n"


_SEAL_KEY = b',"seal":"'


def line_seal_holds(raw: bytes | str, seal: str | None = None) -> bool:
    """Whether a stored line's seal is the sha256 of its bytes without the seal field (docs/run-store.md).

    The one check of a line's seal, over the line as stored (no re-encoding of its content).
    ``seal`` is the line's own ``seal`` when the caller has decoded it; otherwise the last seal
    field of the line is taken. Either way that field must occur exactly once.
    """
    data = raw.encode("utf-8") if isinstance(raw, str) else raw
    data = data.rstrip(b"\n")
    if seal is None:
        at = data.rfind(_SEAL_KEY)
        if at < 0:
            return False
        found = data[at + len(_SEAL_KEY) : at + len(_SEAL_KEY) + 64]
    else:
        found = seal.encode("ascii", "replace")
        at = data.find(_SEAL_KEY + found + b'"')
        if at < 0:
            return False
    end = at + len(_SEAL_KEY) + len(found)
    if len(found) != 64 or data[end : end + 1] != b'"' or data.count(data[at : end + 1]) != 1:
        return False
    digest = hashlib.sha256(memoryview(data)[:at])
    digest.update(memoryview(data)[end + 1 :])
    return digest.hexdigest().encode() == found


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a store is read and summarised: many small records are kept and
    none is cyclic, so a collection would only rescan them (on 100,000 trials, half a second per report)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def run_folder_name(manifest: Manifest, now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now if now is not None else time.time()))
    return f"{manifest.experiment}-{stamp}-{manifest.seal[:8]}"


def create_run(out: Path, manifest: Manifest) -> Path:
    """A new run folder under ``out`` holding the sealed manifest; refuses to reuse a folder."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(
            f"--out {out}: cannot create the folder ({error.strerror}); choose a writable folder"
        ) from None
    base = run_folder_name(manifest)
    folder = out / base
    suffix = 1
    while True:
        try:
            folder.mkdir()
            break
        except FileExistsError:
            suffix += 1
            folder = out / f"{base}-{suffix}"
        except OSError as error:
            raise UsageError(f"--out {out}: cannot create a run folder ({error.strerror})") from None
    (folder / MANIFEST).write_text(pretty_json(manifest_document(manifest)), encoding="utf-8")
    (folder / TRIALS).touch()
    return folder


class TrialSink:
    """Appends sealed lines to trials.jsonl, each written whole as it is made; a failure is an instrument error.

    Opening it takes the store's writer lock (a second runner refuses in one line) and cuts a
    torn last line left by a killed run (``certlab_core.gate.resume``); ``torn_bytes`` says how
    many bytes were cut.
    """

    def __init__(self, folder: Path) -> None:
        self.path = folder / TRIALS
        self._fd: int | None = None
        self._lock: int | None = None
        self.torn_bytes = 0

    def __enter__(self) -> TrialSink:
        self._lock = lock_store(self.path.parent)
        try:
            self.torn_bytes = cut_torn_tail(self.path)
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
            self._fd = os.open(self.path, flags, 0o644)
            keep_from_children(self._fd)  # a trial forked from this process (an agent's code) cannot append to it
        except OSError as error:
            unlock_store(self._lock)
            raise InstrumentError(f"{self.path}: cannot open the record sink ({error.strerror})") from None
        except BaseException:
            unlock_store(self._lock)
            raise
        return self

    def append(self, line: Mapping[str, Any]) -> str:
        raise_if_interrupted()  # an interrupt Python dropped stops the run here, before this line is written
        text = seal_line(line)
        data = memoryview(text.encode("utf-8"))
        try:
            assert self._fd is not None
            while data:
                written = os.write(self._fd, data)
                data = data[written:]
        except OSError as error:
            raise InstrumentError(f"{self.path}: the record sink failed ({error}); the experiment is invalid") from None
        return text

    def __exit__(self, *_exc: object) -> None:
        if self._fd is not None:
            release_to_children(self._fd)
            with contextlib.suppress(OSError):
                os.fsync(self._fd)
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
        if self._lock is not None:
            unlock_store(self._lock)
            self._lock = None


def write_decision(folder: Path, decision: Mapping[str, Any]) -> Path:
    """Replace the store's decision.json (a link in its place is replaced, never written through)."""
    path = folder / DECISION
    replace_file(path, pretty_json(dict(decision)).encode("utf-8"), "decision")
    return path


@frozen
class RunStore:
    """A run store opened for reading: the verified manifest; trials.jsonl is read a line at a time, never held."""

    folder: Path
    manifest: Manifest

    @property
    def raw_lines(self) -> Iterator[str]:
        """The lines of trials.jsonl, read afresh from the file at each call (see :func:`iter_raw_lines`)."""
        return iter_raw_lines(self.folder / TRIALS)

    def lines(self) -> Iterator[dict[str, Any]]:
        """Each line parsed (lines that are not JSON objects are skipped; the decision reports them)."""
        for raw in self.raw_lines:
            try:
                document = json.loads(raw)
            except ValueError:
                continue
            if isinstance(document, dict):
                yield document


def iter_raw_lines(path: Path) -> Iterator[str]:
    """The lines of trials.jsonl one at a time, without their newline (split on newlines only: a record may hold
    U+2028 and kin), so a large store is never held in memory whole."""
    missing = f"{path}: missing; this run store has no trial records"
    for number, raw in enumerate(iter_capped_lines(path, "trials store", InstrumentError, missing), 1):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InstrumentError(f"{path} line {number}: not UTF-8 text; the run store is damaged") from None


_RELEASE_BYTES = 16 << 20  # how much of the mapped file is read before its pages are handed back


def iter_raw_line_bytes(path: Path, start: int = 0, end: int | None = None) -> Iterator[bytes]:
    """The lines of trials.jsonl as bytes, without their newline (split on ``\\n`` only), read through a memory map.

    No line is decoded here: a sealed line's seal is checked over its raw bytes, which proves
    them the UTF-8 text the writer sealed; a reader decodes only what it parses. ``start`` and
    ``end`` read only that byte range (``start`` just after a newline, ``end`` just after one
    or the file's end). The file is mapped rather than read, which saves copying it once
    through a buffer; the pages already read are handed back every 16 MB, so the map never
    holds much of a large store in the reader's memory. Lines appended while it reads are
    not seen (the map's size is the file's size when it was opened). Only a regular file is
    read, and a line longer than 16 MB is refused (``certlab_core.sdk.safe_io``); there is no cap on
    the number of lines.
    """
    missing = f"{path}: missing; this run store has no trial records"
    try:
        with opened_regular(path, "trials store", InstrumentError, missing) as handle:
            size = os.fstat(handle.fileno()).st_size
            stop = size if end is None else min(end, size)
            if stop <= start:
                return
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
                find = view.find
                position = start
                released = start - start % mmap.PAGESIZE
                while position < stop:
                    newline = find(b"\n", position, stop)
                    if newline < 0:
                        if stop - position > MAX_DOCUMENT_BYTES:
                            raise InstrumentError(line_too_long(path, _line_number(view, position)))
                        yield view[position:stop]
                        break
                    if newline - position > MAX_DOCUMENT_BYTES:
                        raise InstrumentError(line_too_long(path, _line_number(view, position)))
                    yield view[position:newline]
                    position = newline + 1
                    if position - released >= _RELEASE_BYTES:
                        upto = position - position % mmap.PAGESIZE
                        view.madvise(mmap.MADV_DONTNEED, released, upto - released)
                        released = upto
    except (OSError, ValueError) as error:  # ValueError: a file that cannot be mapped
        raise InstrumentError(f"{path}: unreadable ({type(error).__name__}); the run store is damaged") from None


def _line_number(view: mmap.mmap, position: int) -> int:
    """The number of the line that starts at ``position`` (counted only on the way to a refusal)."""
    number, at = 1, view.find(b"\n", 0, position)
    while at >= 0:
        number += 1
        at = view.find(b"\n", at + 1, position)
    return number


def open_manifest(folder: Path) -> Manifest:
    """The verified manifest of the run store ``folder`` (its lines are verified by the decision)."""
    if not folder.is_dir():
        raise UsageError(f"{folder}: not a folder; give a run store made by 'certlab run' (its line 'run: RUNDIR')")
    return read_manifest(folder / MANIFEST)


def read_store(folder: Path) -> RunStore:
    """Open a run store: the manifest is verified here; the lines are read (and verified by the decision) later."""
    manifest = open_manifest(folder)
    if not (folder / TRIALS).is_file():
        raise InstrumentError(f"{folder / TRIALS}: missing; this run store has no trial records")
    return RunStore(folder=folder, manifest=manifest)


def earlier_runs(folder: Path, manifest: Manifest, notes: list[str] | None = None) -> list[Path]:
    """Sibling run stores of the same experiment id, oldest first (for reports, never for the decision).

    A sibling whose manifest cannot be read (not a regular file, too large, not JSON...) is
    skipped, with a line in ``notes`` when given: an earlier run never changes a verdict.
    """
    found: list[tuple[float, Path]] = []
    try:
        here = folder.resolve()
        candidates = sorted(here.parent.iterdir())
    except (OSError, RuntimeError):
        return []
    for candidate in candidates:
        path = candidate / MANIFEST
        try:
            if candidate.resolve() == here or not (path.exists() or path.is_symlink()):
                continue
            document = load_json(path, "manifest")
            mtime = path.stat().st_mtime
        except CertlabError as error:
            if notes is not None:
                notes.append(f"earlier run {candidate.name} skipped: {error.message}")
            continue
        except (OSError, RuntimeError) as error:
            if notes is not None:
                notes.append(f"earlier run {candidate.name} skipped: {path}: unreadable ({type(error).__name__})")
            continue
        if isinstance(document, dict) and document.get("experiment") == manifest.experiment:
            found.append((mtime, candidate))
    return [path for _mtime, path in sorted(found)]


EARLIER_SKIPPED = "skipped"


def summarise_earlier(paths: Sequence[Path]) -> list[str]:
    """One line per earlier run: its folder and the verdict its decision.json records (``skipped (why)`` if damaged)."""
    lines = []
    for path in paths:
        verdict = "no decision"
        decision = path / DECISION
        try:
            if decision.exists() or decision.is_symlink():
                document = load_json(decision, "decision")
                if isinstance(document, dict):
                    verdict = str(document.get("verdict", verdict))[:40]
        except CertlabError as error:
            verdict = f"{EARLIER_SKIPPED} ({error.message})"
        except OSError as error:
            verdict = f"{EARLIER_SKIPPED} ({decision}: unreadable, {type(error).__name__})"
        lines.append(f"{path.name}: {verdict}")
    return lines


def earlier_lines(folder: Path, manifest: Manifest) -> list[str]:
    """What ``run`` and ``gate`` print of the earlier runs beside ``folder``: a verdict each, then what was skipped."""
    notes: list[str] = []
    return summarise_earlier(earlier_runs(folder, manifest, notes)) + notes
