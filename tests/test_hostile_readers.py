"""Readers that cannot be turned against the reader: FIFOs, devices, folders, deep or huge JSON, mutated bytes.

Every file certlab reads back may be hostile. Each command here meets a FIFO (which would block
a plain open forever), ``/dev/zero`` (which never ends), a folder, JSON nested 100,000 deep or
an integer of 5,000 digits in place of a manifest, a trials store, a decision, a certification
bundle, a reproducer or a descriptor, and must refuse in one line with the right exit code:
never hang, never "internal error", never a traceback. The property tests feed each reader
arbitrary and mutated bytes.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from certlab_core.plugin.errors import EXIT_ERROR, EXIT_USAGE, CertlabError, InstrumentError, UsageError
from certlab_core.sdk.safe_io import MAX_DOCUMENT_BYTES, MAX_NESTING, load_json, nesting_depth, parse_json

REPO = Path(__file__).resolve().parent.parent
ARCHIVED = REPO / "tests" / "archived_stores" / "block"
PUBLISHED = REPO / "certifications" / "pattern-fixer-intervals-k3" / "bundle.json"
DEEP = "[" * 100_000 + "]" * 100_000
HUGE_INT = '{"schema": ' + "9" * 5000 + "}"
CLI_TIMEOUT_S = 60


def certlab(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The real CLI in a fresh interpreter, its address space capped at 3 GB: a reader that tried to read
    ``/dev/zero`` whole fails fast here instead of taking the machine's memory."""

    def cap_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    return subprocess.run(
        [sys.executable, "-m", "certlab_core.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=CLI_TIMEOUT_S,
        check=False,
        preexec_fn=cap_memory,
    )


def assert_one_line_refusal(done: subprocess.CompletedProcess[str], codes: tuple[int, ...]) -> None:
    everything = done.stdout + done.stderr
    assert done.returncode in codes, everything
    assert "internal error" not in everything and "Traceback" not in everything, everything
    errors = [line for line in done.stderr.splitlines() if line.startswith("certlab: error:")]
    assert len(errors) <= 1, done.stderr


def make_store(folder: Path) -> Path:
    shutil.copytree(ARCHIVED, folder)
    return folder


def put(path: Path, kind: str) -> None:
    """Replace ``path`` with a FIFO, a link to /dev/zero, a folder, deep JSON or a huge integer."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    elif kind == "folder":
        path.mkdir()
    elif kind == "deep":
        path.write_text(DEEP)
    elif kind == "huge-int":
        path.write_text(HUGE_INT)
    else:
        raise AssertionError(kind)


# --------------------------------------------------------------------------- the 11 cases, with each hostile file


def _gate(tmp: Path, kind: str, name: str) -> subprocess.CompletedProcess[str]:
    store = make_store(tmp / "store")
    put(store / name, kind)
    return certlab("gate", str(store))


def _report(tmp: Path, kind: str, name: str) -> subprocess.CompletedProcess[str]:
    store = make_store(tmp / "store")
    put(store / name, kind)
    return certlab("report", str(store))


def _rederive(tmp: Path, kind: str, name: str) -> subprocess.CompletedProcess[str]:
    store = make_store(tmp / "store")
    put(store / name, kind)
    return certlab("rederive", str(store))


def _bundle(tmp: Path, kind: str, name: str) -> subprocess.CompletedProcess[str]:
    store = make_store(tmp / "store")
    put(store / name, kind)
    return certlab("bundle", str(store), "candidate/reserve-timeout/0", "--out", str(tmp / "repro.json"))


def _run(tmp: Path, kind: str, _name: str) -> subprocess.CompletedProcess[str]:
    put(tmp / "certlab.yaml", kind)
    return certlab("run", str(tmp / "certlab.yaml"), "--out", str(tmp / "runs"), "--quiet")


def _regrade(tmp: Path, kind: str, _name: str) -> subprocess.CompletedProcess[str]:
    (tmp / "cert").mkdir()
    put(tmp / "cert" / "bundle.json", kind)
    return certlab("regrade", str(tmp / "cert"))


def _replay(tmp: Path, kind: str, _name: str) -> subprocess.CompletedProcess[str]:
    put(tmp / "repro.json", kind)
    return certlab("replay", str(tmp / "repro.json"))


CASES: dict[str, tuple[Callable[[Path, str, str], subprocess.CompletedProcess[str]], str, tuple[int, ...]]] = {
    "gate-manifest": (_gate, "manifest.json", (EXIT_ERROR,)),
    "gate-trials": (_gate, "trials.jsonl", (EXIT_ERROR,)),
    "gate-decision": (_gate, "decision.json", (EXIT_ERROR,)),  # a recomputed ERROR naming decision.json
    "report-manifest": (_report, "manifest.json", (EXIT_ERROR,)),
    "report-trials": (_report, "trials.jsonl", (EXIT_ERROR,)),
    "report-decision": (_report, "decision.json", (0, EXIT_ERROR)),  # the report says decision.json differs
    "rederive-decision": (_rederive, "decision.json", (1,)),  # differs from the re-derived one
    "bundle-trials": (_bundle, "trials.jsonl", (EXIT_ERROR,)),
    "run-descriptor": (_run, "certlab.yaml", (EXIT_USAGE,)),
    "regrade-bundle": (_regrade, "bundle.json", (EXIT_ERROR,)),
    "replay-reproducer": (_replay, "repro.json", (EXIT_ERROR,)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_fifo_in_place_of_a_file_is_refused_in_one_line_never_waited_on(case: str, tmp_path: Path) -> None:
    command, name, codes = CASES[case]
    done = command(tmp_path, "fifo", name)  # a plain open would block here until the timeout
    assert_one_line_refusal(done, codes)


def _read_trials(path: Path) -> object:
    from certlab_core._runtime.registry import discover
    from certlab_core.gate.decision import decide_file
    from certlab_core.gate.manifest import read_manifest

    manifest = read_manifest(ARCHIVED / "manifest.json")
    return decide_file(manifest, path, discover().get("statistical_rules", manifest.rule.name), workers=1)


def _read_manifest(path: Path) -> object:
    from certlab_core.gate.manifest import read_manifest

    return read_manifest(path)


def _read_certification(path: Path) -> object:
    from certlab_core.certify.regrade import read_bundle

    return read_bundle(path)


def _read_reproducer(path: Path) -> object:
    from certlab_diagnosis.bundle import read_bundle

    from certlab_core.cli.services import services_for

    return read_bundle(path, services_for())


def _read_descriptor(path: Path) -> object:
    from certlab_core.gate.descriptor import load_descriptor

    return load_descriptor(path)


def _read_earlier_decision(path: Path) -> object:
    from certlab_core.gate.store import summarise_earlier

    (line,) = summarise_earlier([path.parent])
    assert line.startswith(f"{path.parent.name}: skipped ("), line
    return line


def _read_lock(path: Path) -> object:
    from certlab_acceptance.lock import lock_path, read_lock

    lock_path(path.parent).parent.mkdir()
    path.rename(lock_path(path.parent))
    return read_lock(path.parent)


def _read_predictions(path: Path) -> object:
    from certlab_acceptance.lock import predictions_path
    from certlab_acceptance.prediction import read_predictions

    predictions_path(path.parent).parent.mkdir()
    path.rename(predictions_path(path.parent))
    return read_predictions(path.parent)


def _read_task_config(path: Path) -> object:
    from certlab_acceptance.user_task import read_config

    return read_config(path.parent)


READERS: dict[str, tuple[Callable[[Path], object], str, tuple[int, ...]]] = {
    "manifest": (_read_manifest, "manifest.json", (EXIT_ERROR,)),
    "trials": (_read_trials, "trials.jsonl", (EXIT_ERROR,)),
    "certification": (_read_certification, "bundle.json", (EXIT_ERROR,)),
    "reproducer": (_read_reproducer, "repro.json", (EXIT_ERROR,)),
    "descriptor": (_read_descriptor, "certlab.yaml", (EXIT_USAGE,)),
    "earlier-decision": (_read_earlier_decision, "decision.json", ()),
    "held-out-lock": (_read_lock, "lock.json", (EXIT_ERROR,)),
    "predictions": (_read_predictions, "predictions.jsonl", (EXIT_ERROR,)),
    "task-config": (_read_task_config, "certlab.yaml", (EXIT_USAGE,)),
}


@pytest.mark.parametrize("kind", ["fifo", "zero", "folder", "deep", "huge-int"])
@pytest.mark.parametrize("reader", sorted(READERS))
def test_each_reader_refuses_a_device_a_folder_deep_json_or_a_huge_integer(
    reader: str, kind: str, tmp_path: Path
) -> None:
    read, name, codes = READERS[reader]
    path = tmp_path / "run" / name
    path.parent.mkdir()
    put(path, kind)
    with no_hang():
        try:
            read(path)
        except CertlabError as error:
            assert error.exit_code in codes and "\n" not in error.message, error.message
            assert path.name in error.message or path.parent.name in error.message, error.message
        else:
            # What reads no JSON, or keeps an unreadable line as a marker, may take deep JSON or a huge integer.
            takes = {"trials", "predictions"} if kind in ("deep", "huge-int") else set()
            assert reader in {"earlier-decision", *takes}, reader


def test_a_store_line_longer_than_the_cap_is_refused_and_the_store_has_no_total_cap(tmp_path: Path) -> None:
    store = make_store(tmp_path / "store")
    lines = (store / "trials.jsonl").read_bytes()
    (store / "trials.jsonl").write_bytes(lines * 40)  # many lines: no total cap, the decision reads them all
    with no_hang():
        assert _read_trials(store / "trials.jsonl")
    with (store / "trials.jsonl").open("ab") as handle:
        handle.write(b'{"x":"' + b"a" * (MAX_DOCUMENT_BYTES + 10) + b'"}\n')
    with pytest.raises(InstrumentError, match="longer than 16 MB"):
        _read_trials(store / "trials.jsonl")


# --------------------------------------------------------------------------- the reading functions themselves


def test_nesting_is_counted_outside_strings_only() -> None:
    assert nesting_depth(b'{"a": [1, {"b": "' + b"[" * 500 + b'"}]}') == 3
    assert nesting_depth("[" * 201 + "]" * 201) == 201
    assert nesting_depth('["\\"' + "[" * 500 + '"]') == 1  # an escaped quote does not end the string
    assert nesting_depth("[[[]]]") <= MAX_NESTING  # few brackets: a bound, never more than the cap


def test_the_caps_are_exactly_those_documented(tmp_path: Path) -> None:
    at_cap = "[" * MAX_NESTING + "]" * MAX_NESTING
    assert parse_json(at_cap, "x") == parse_json(at_cap, "x")
    with pytest.raises(InstrumentError, match="nested more than 200 levels"):
        parse_json("[" + at_cap + "]", "x")
    with pytest.raises(UsageError, match="not JSON"):
        parse_json(HUGE_INT, "x", UsageError)
    big = tmp_path / "big.json"
    with big.open("wb") as handle:
        handle.truncate(MAX_DOCUMENT_BYTES + 1)
    with pytest.raises(InstrumentError, match="more than the 16 MB"):
        load_json(big, "manifest")


# --------------------------------------------------------------------------- property tests, one per reader


@contextlib.contextmanager
def no_hang(seconds: int = 120) -> Iterator[None]:
    # A hang never ends; a reader's worst honest input takes about 2 CPU s, which a loaded CI machine (load 20
    # on 2 cores) stretched past an earlier 20 s bound.
    def stop(_signum: int, _frame: Any) -> None:
        raise AssertionError(f"a reader took more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def refuses_cleanly(call: Callable[[], object], exit_codes: tuple[int, ...], lines: bool = False) -> None:
    """``call`` returns, or raises a CertlabError of one line (one line per problem with ``lines``) with one of
    ``exit_codes``: nothing else."""
    with no_hang():
        try:
            call()
        except CertlabError as error:
            assert error.message, error
            if lines:
                assert all(part.strip() for part in error.message.split("\ncertlab: error: ")), error.message
            else:
                assert "\n" not in error.message, error.message
            assert error.exit_code in exit_codes, error.message


def mutated(original: bytes) -> st.SearchStrategy[bytes]:
    """``original`` with a few bytes replaced, cut short, or with bytes inserted."""
    size = len(original)

    def apply(edits: list[tuple[int, int, int]]) -> bytes:
        data = bytearray(original)
        for kind, where, value in edits:
            at = where % (len(data) + 1)
            if kind == 0 and at < len(data):
                data[at] = value
            elif kind == 1:
                del data[at:]
            else:
                data[at:at] = bytes([value]) * (1 + value % 5)
        return bytes(data)

    edit = st.tuples(st.integers(0, 2), st.integers(0, max(size - 1, 0)), st.integers(0, 255))
    return st.lists(edit, min_size=1, max_size=4).map(apply)


HOSTILE_TEXT = st.one_of(
    st.binary(max_size=300),
    st.sampled_from([DEEP.encode()[:4000] + b"]" * 10, HUGE_INT.encode(), b"", b"\xff\xfe", b"NaN", b"[" * 300]),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
        max_leaves=10,
    ).map(lambda value: json.dumps(value).encode()),
)
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
MANIFEST = (ARCHIVED / "manifest.json").read_bytes()
TRIALS = (ARCHIVED / "trials.jsonl").read_bytes()
DECISION = (ARCHIVED / "decision.json").read_bytes()
BUNDLE = PUBLISHED.read_bytes()
DESCRIPTOR = (REPO / "examples" / "retry" / "a_vs_b.yaml").read_bytes()


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostile")


@PROPERTY
@given(st.one_of(HOSTILE_TEXT, mutated(MANIFEST)))
def test_the_manifest_reader_takes_any_bytes(scratch: Path, data: bytes) -> None:
    from certlab_core.gate.manifest import read_manifest

    (scratch / "manifest.json").write_bytes(data)
    refuses_cleanly(lambda: read_manifest(scratch / "manifest.json"), (EXIT_ERROR,))


@PROPERTY
@given(st.one_of(HOSTILE_TEXT, mutated(TRIALS[:20000])))
def test_the_trials_reader_takes_any_bytes(scratch: Path, registry: Any, data: bytes) -> None:
    from certlab_core.gate.decision import decide_file
    from certlab_core.gate.manifest import read_manifest

    manifest = read_manifest(ARCHIVED / "manifest.json")
    rule = registry.get("statistical_rules", manifest.rule.name)
    (scratch / "trials.jsonl").write_bytes(data)
    refuses_cleanly(lambda: decide_file(manifest, scratch / "trials.jsonl", rule, workers=1), (EXIT_ERROR,))


@PROPERTY
@given(st.one_of(HOSTILE_TEXT, mutated(DECISION)))
def test_the_earlier_runs_reader_takes_any_decision_and_manifest(scratch: Path, data: bytes) -> None:
    from certlab_core.gate.manifest import read_manifest
    from certlab_core.gate.store import earlier_lines

    here, other = scratch / "runs" / "here", scratch / "runs" / "other"
    for folder in (here, other):
        folder.mkdir(parents=True, exist_ok=True)
    (other / "manifest.json").write_bytes(MANIFEST if data[:1] != b"{" else data)
    (other / "decision.json").write_bytes(data)
    lines = earlier_lines(here, read_manifest(ARCHIVED / "manifest.json"))
    assert all("\n" not in line for line in lines)


@PROPERTY
@given(st.one_of(HOSTILE_TEXT, mutated(BUNDLE[:3000] + BUNDLE[-3000:])))
def test_the_certification_bundle_reader_takes_any_bytes(scratch: Path, data: bytes) -> None:
    from certlab_core.certify.regrade import read_bundle

    (scratch / "bundle.json").write_bytes(data)
    refuses_cleanly(lambda: read_bundle(scratch / "bundle.json"), (EXIT_ERROR,))


REPRODUCER_SHAPE = json.dumps(
    {
        "schema": "certlab.repro/1",
        "experiment": "x",
        "run": "r",
        "manifest_seal": "0" * 64,
        "manifest": {},
        "trial": {"id": "candidate/clean/0"},
        "agent": {"reference": "m:f", "rng_seed": 1, "task": {}},
        "files": [{"path": "m.py", "module": "m", "text": "", "sha256": "0" * 64}],
        "seal": "0" * 64,
    }
).encode()


@PROPERTY
@given(st.one_of(HOSTILE_TEXT, mutated(REPRODUCER_SHAPE)))
def test_the_reproducer_reader_takes_any_bytes(scratch: Path, data: bytes) -> None:
    from certlab_diagnosis.bundle import read_bundle

    from certlab_core.cli.services import services_for

    (scratch / "repro.json").write_bytes(data)
    refuses_cleanly(lambda: read_bundle(scratch / "repro.json", services_for()), (EXIT_ERROR,))


@PROPERTY
@given(st.one_of(HOSTILE_TEXT, mutated(DESCRIPTOR)))
def test_the_descriptor_reader_takes_any_bytes(scratch: Path, data: bytes) -> None:
    from certlab_core.gate.descriptor import load_descriptor

    (scratch / "certlab.yaml").write_bytes(data)
    refuses_cleanly(lambda: load_descriptor(scratch / "certlab.yaml"), (EXIT_USAGE,), lines=True)


SIGNED = REPO / "certifications" / "pattern-fixer-intervals-k3"
PUBLIC_KEY = REPO / "certifications" / "certlab.pub"
ENVELOPE = (SIGNED / "evidence.dsse.json").read_bytes()


@pytest.fixture(scope="module")
def signed_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of a published, signed certification, whose envelope each example replaces."""
    folder = tmp_path_factory.mktemp("signed")
    for item in SIGNED.iterdir():
        (folder / item.name).write_bytes(item.read_bytes())
    return folder


def test_the_published_signature_verifies_before_it_is_mutated() -> None:
    from certlab_signing.evidence import verify_folder

    assert verify_folder(SIGNED, PUBLIC_KEY).subjects == len(list(SIGNED.iterdir())) - 1


@PROPERTY
@given(st.one_of(HOSTILE_TEXT, mutated(ENVELOPE)))
def test_the_signature_envelope_reader_takes_any_bytes(signed_copy: Path, data: bytes) -> None:
    from certlab_signing.evidence import verify_folder

    (signed_copy / "evidence.dsse.json").write_bytes(data)
    verified: list[object] = []
    refuses_cleanly(lambda: verified.append(verify_folder(signed_copy, PUBLIC_KEY)), (EXIT_ERROR,))
    if verified:  # only the envelope that was signed verifies, whatever its spacing
        assert json.loads(data) == json.loads(ENVELOPE)


@PROPERTY
@given(st.one_of(HOSTILE_TEXT, mutated(PUBLIC_KEY.read_bytes())))
def test_the_public_key_reader_takes_any_bytes(scratch: Path, data: bytes) -> None:
    from certlab_signing.evidence import verify_folder

    (scratch / "hostile.pub").write_bytes(data)
    refuses_cleanly(lambda: verify_folder(SIGNED, scratch / "hostile.pub"), (EXIT_ERROR, EXIT_USAGE))


@pytest.mark.parametrize(
    ("args", "what"),
    [
        (["report", str(ARCHIVED), "--out"], "--out"),
        (["gate", str(ARCHIVED), "--junit"], "--junit"),
        (["report", str(ARCHIVED), "--format", "markdown", "--out"], "--out"),
    ],
    ids=["report", "gate-junit", "report-markdown"],
)
def test_an_output_file_that_is_a_fifo_nobody_reads_is_one_line_not_a_hang(
    args: list[str], what: str, tmp_path: Path
) -> None:
    # Before, each of these opened the FIFO for writing and waited for a reader forever. Every output file a user
    # names (bundle, minimize, init too) is written by the one writer, safe_io.write_output.
    fifo = tmp_path / "out"
    os.mkfifo(fifo)
    done = subprocess.run(
        [sys.executable, "-m", "certlab_core.cli", *args, str(fifo)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == EXIT_USAGE, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"certlab: error: {what} {fifo}: cannot write (a FIFO that nothing reads); choose a writable file"
    )


@pytest.mark.parametrize(
    ("args", "what", "target"),
    [
        (["report", "{store}", "--out"], "--out", "decision.json"),
        (["report", "{store}", "--format", "markdown", "--out"], "--out", "manifest.json"),
        (["gate", "{store}", "--junit"], "--junit", "trials.jsonl"),
        (["gate", "{store}", "--markdown"], "--markdown", "reports/gate.md"),
        (["report", "{store}", "--out"], "--out", "link"),
    ],
    ids=["report-decision", "markdown-manifest", "junit-trials", "markdown-new-folder", "link-into-the-store"],
)
def test_an_output_file_in_the_run_store_it_reports_on_is_refused_and_the_store_kept(
    args: list[str], what: str, target: str, tmp_path: Path
) -> None:
    # Before: report -o RUN/decision.json wrote the report over the decision, and gate --junit RUN/trials.jsonl
    # over every trial: the records the output was made from were lost.
    store = make_store(tmp_path / "store")
    out = store / target
    if target == "link":
        out = tmp_path / "report.txt"
        out.symlink_to(store / "trials.jsonl")
    done = certlab(*[arg.format(store=store) for arg in args], str(out))
    assert done.returncode == EXIT_USAGE, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        f"certlab: error: {what} {out}: inside {store}, whose records this command reads; write it elsewhere"
    ]
    assert sorted(p.name for p in store.iterdir()) == sorted(p.name for p in ARCHIVED.iterdir())
    for kept in ARCHIVED.iterdir():
        assert (store / kept.name).read_bytes() == kept.read_bytes(), kept.name


def test_an_output_file_that_is_a_link_loop_is_one_line_not_an_internal_error(tmp_path: Path) -> None:
    # The check that an output is outside its run store resolved the path first: a link loop there raised
    # RuntimeError ("Symlink loop"), an internal error, where the write itself says so in one line.
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    done = certlab("report", str(ARCHIVED), "--out", str(loop))
    assert done.returncode == EXIT_USAGE, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"certlab: error: --out {loop}: cannot write (Too many levels of symbolic links); choose a writable file"
    ]


def test_rederive_write_replaces_the_decision_without_following_a_link_planted_in_the_store(tmp_path: Path) -> None:
    # Before: the new decision went to decision.json.tmp first, through a link of that name to any file.
    store = make_store(tmp_path / "store")
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (store / "decision.json.tmp").symlink_to(victim)
    (store / "decision.json").unlink()
    (store / "decision.json").symlink_to(victim)  # differs from the re-derived one: --write replaces it
    done = certlab("rederive", str(store), "--write")
    assert done.returncode == 0, done.stdout + done.stderr
    assert victim.read_text() == "precious\n"
    assert (store / "decision.json").read_bytes() == (ARCHIVED / "decision.json").read_bytes()
    assert sorted(p.name for p in store.iterdir()) == [
        "decision.json",
        "decision.json.tmp",
        "manifest.json",
        "trials.jsonl",
    ]


def test_a_record_is_read_only_from_values_of_the_kinds_its_fields_declare() -> None:
    """cattrs alone reads text where a list belongs as its letters, a number or a list where text belongs as its
    ``str()``, and any value where a flag belongs as its truth; every document certlab reads back is hostile."""
    from certlab_core.certify.lab import TrialRecord
    from certlab_core.sdk.canonical import ShapeError, structure, unstructure

    bundle = json.loads(PUBLISHED.read_text())
    good = bundle["trials"][0]
    record = structure(good, TrialRecord)  # a published trial, with keys TrialRecord does not read, is read
    assert record.id == good["id"] and record.repeat == good["repeat"]
    assert structure(unstructure(record), TrialRecord) == record
    assert structure(dict(good, timings={"agent_s": 1}), TrialRecord).timings == {"agent_s": 1.0}  # an integer number
    change = good["changes"][0]
    wrong = {
        "id": (7, "trial.id: expected text, found a number"),
        "family": (["intervals"], "trial.family: expected text, found an array"),
        "repeat": ("1", "trial.repeat: expected an integer, found text"),
        "exit_code": (True, "trial.exit_code: expected an integer, found true or false"),
        "leftover_processes": ("sleep 9", "trial.leftover_processes: expected an array, found text"),
        "changes": ([dict(change, omitted="false")], "trial.changes[0].omitted: expected true or false, found text"),
        "timings": ({"agent_s": "0.1"}, "trial.timings['agent_s']: expected a number, found text"),
        "output_tail": (["stdout"], "trial.output_tail: expected an object, found an array"),
        "usage": ("none", "trial.usage: expected an object, found text"),
    }
    for name, (value, said) in wrong.items():
        with pytest.raises(ShapeError) as raised:
            structure(dict(good, **{name: value}), TrialRecord, "trial")
        assert str(raised.value).startswith(said), (name, str(raised.value))
