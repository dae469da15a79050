"""The acceptance grader: each held-out case in its own fresh process, judged in the grader, never leaking answers."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
from certlab_acceptance import plugin

from certlab_core.plugin import failure_modes as fm
from certlab_core.plugin.types.family import Defect, TaskFamily
from certlab_core.plugin.types.grader import AcceptanceLock, GradeRequest, GradeResult
from certlab_core.sdk.services import installed_plugins
from certlab_core.sdk.workcopy import materialise

PROBE = Defect(id="probe", defect_class="none", description="a probe", seeds=())


def subject_request(
    tmp_path: Path, source: str, cases: Sequence[dict[str, Any]], lock: AcceptanceLock | None = None
) -> GradeRequest:
    """A one-module family whose work copy holds ``source`` as subject.py, with these held-out cases."""
    tree = tmp_path / "family" / "tree"
    (tree / "tests").mkdir(parents=True)
    (tree / "subject.py").write_text(textwrap.dedent(source), encoding="utf-8")
    (tree / "tests" / "test_subject.py").write_text("def test_nothing():\n    assert True\n", encoding="utf-8")
    cases_file = tmp_path / "family" / "cases" / "acceptance.jsonl"
    cases_file.parent.mkdir()
    cases_file.write_text("".join(json.dumps(case) + "\n" for case in cases), encoding="utf-8")
    prompt = tmp_path / "family" / "TASK.md"
    prompt.write_text("fix it\n", encoding="utf-8")
    family = TaskFamily(
        name="subject",
        version="1",
        description="a probe family",
        tree_dir=str(tree),
        prompt_file=str(prompt),
        cases_file=str(cases_file),
        allowed_paths=["subject.py"],
        test_paths=["tests"],
        module_names=["subject"],
        defects=[PROBE],
    )
    work = tmp_path / "work"
    issued = materialise(family, None, work)
    return GradeRequest(workdir=str(work), family=family, defect=PROBE, issued=issued, acceptance_lock=lock)


def case(case_id: str, call: str, *args: Any, expect: Any = None, raises: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"id": case_id, "call": call, "args": list(args)}
    if raises is not None:
        out["raises"] = raises
    else:
        out["expect"] = expect
    return out


def failed(result: GradeResult) -> dict[str, str]:
    return {entry["id"]: entry["got"] for entry in result.data["failed"]}


def test_the_grader_is_installed_third_in_the_chain() -> None:
    from certlab_core.sdk.grading import grader_chain

    names = [grader.name for grader in grader_chain(installed_plugins())]
    assert names[:3] == ["policy", "suite", "acceptance"]
    assert plugin.ORDER == 30


def test_the_oracle_holds_every_held_out_case_of_every_installed_family(tmp_path: Path) -> None:
    registry = installed_plugins()
    families = list(registry.all("task_families").values())
    assert families
    for family in families:
        work = tmp_path / family.name
        issued = materialise(family, None, work)
        result = plugin.grade(GradeRequest(workdir=str(work), family=family, defect=PROBE, issued=issued))
        assert result.passed, (family.name, result.detail)
        assert result.data["held"] == result.data["cases"] > 0


def test_a_seeded_defect_fails_as_overfit_and_records_what_the_code_returned(tmp_path: Path) -> None:
    family = installed_plugins().get("task_families", "intervals")
    defect = next(d for d in family.defects if d.id == "clamp-to-end")
    work = tmp_path / "work"
    issued = materialise(family, defect, work)
    result = plugin.grade(GradeRequest(workdir=str(work), family=family, defect=defect, issued=issued))
    assert not result.passed
    assert result.failure_mode == fm.OVERFIT_TO_VISIBLE_TESTS
    assert failed(result) == {"clamp-far-above": "returned 50", "clamp-at-end": "returned 50"}
    # What was expected (49) is nowhere in the record. The timings are left out of the search: CI once failed
    # on a wall time of 0.1449 s.
    assert "49" not in json.dumps(without_timings(result.data)) and "49" not in result.detail


def without_timings(value: Any) -> Any:
    """``value`` without the keys that hold seconds (``..._s``), at any depth."""
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items() if not str(k).endswith("_s")}
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


def test_results_are_compared_as_json_data_and_exceptions_by_class_name(tmp_path: Path) -> None:
    source = """
        def pair(a, b):
            return (a, b)

        def boom(kind):
            raise {"value": ValueError, "key": KeyError}[kind]("no")

        def nothing():
            return None
    """
    request = subject_request(
        tmp_path,
        source,
        [
            case("tuple-as-list", "subject:pair", 1, "x", expect=[1, "x"]),
            case("wrong-value", "subject:pair", 1, 2, expect=[2, 1]),
            case("raises-value", "subject:boom", "value", raises="ValueError"),
            case("raises-other", "subject:boom", "key", raises="ValueError"),
            case("expected-a-raise", "subject:nothing", raises="ValueError"),
            case("null", "subject:nothing", expect=None),
        ],
    )
    result = plugin.grade(request)
    assert result.failure_mode == fm.OVERFIT_TO_VISIBLE_TESTS
    assert failed(result) == {
        "wrong-value": "returned [1, 2]",
        "raises-other": "raised KeyError",
        "expected-a-raise": "returned null",
    }
    assert result.data["held"] == 3


def test_an_object_cannot_pass_by_claiming_equality(tmp_path: Path) -> None:
    source = """
        class Anything:
            def __eq__(self, other):
                return True

        class SneakyInt(int):
            def __eq__(self, other):
                return True
            __hash__ = int.__hash__

        class SneakyList(list):
            def __eq__(self, other):
                return True

        def anything():
            return Anything()

        def sneaky_int():
            return SneakyInt(3)

        def sneaky_list():
            return SneakyList([0])

        def a_set():
            return {1, 2}

        def keyed():
            return {1: "one"}
    """
    request = subject_request(
        tmp_path,
        source,
        [
            case("object", "subject:anything", expect=42),
            case("int-subclass", "subject:sneaky_int", expect=4),
            case("list-subclass", "subject:sneaky_list", expect=[1, 2]),
            case("set", "subject:a_set", expect=[1, 2]),
            case("int-keys", "subject:keyed", expect={"1": "one"}),
        ],
    )
    got = failed(plugin.grade(request))
    assert set(got) == {"object", "int-subclass", "list-subclass", "set", "int-keys"}
    assert got["int-subclass"] == "returned 3"
    assert got["list-subclass"] == "returned [0]"
    assert "not JSON data" in got["object"] and "not JSON data" in got["set"] and "not JSON data" in got["int-keys"]


def test_each_case_runs_in_a_fresh_process(tmp_path: Path) -> None:
    source = """
        import os
        CALLS = []

        def count():
            CALLS.append(1)
            return len(CALLS)

        def pid():
            return os.getpid()
    """
    cases = [case(f"count-{i}", "subject:count", expect=1) for i in range(4)]
    cases += [case(f"pid-{i}", "subject:pid", expect=-1) for i in range(3)]
    result = plugin.grade(subject_request(tmp_path, source, cases))
    got = failed(result)
    assert not any(name.startswith("count") for name in got)  # a new import for every case
    assert len({got[f"pid-{i}"] for i in range(3)}) == 3


def test_a_case_process_holds_no_expected_value_no_label_and_no_lab_state(tmp_path: Path) -> None:
    # The code under test searches everything it can reach in its own process and in the case
    # host that forked it (objects, environment, arguments, memory) for the case's answer and label.
    source = r"""
        import gc, os, re

        # Joined at run time: a constant folded by the compiler leaves a freed copy in memory, found or not by chance.
        ANSWER, LABEL = "".join(["zebra", "-7391-answer"]), "".join(["kiwi", "-5521-label"])

        def _memory(pid):
            found = b""
            try:
                maps = open(f"/proc/{pid}/maps").read().splitlines()
                with open(f"/proc/{pid}/mem", "rb", 0) as mem:
                    for line in maps:
                        span, perms = line.split()[:2]
                        if not perms.startswith("r"):
                            continue
                        start, end = (int(x, 16) for x in span.split("-"))
                        try:
                            mem.seek(start)
                            found += mem.read(min(end - start, 1 << 26))
                        except (OSError, ValueError, OverflowError):
                            continue
            except OSError as error:
                return "unreadable " + type(error).__name__
            return found

        def search():
            seen = []
            for obj in gc.get_objects():
                for item in (obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()):
                    if not isinstance(item, str) or item is ANSWER or item is LABEL:
                        continue
                    if ANSWER in item or LABEL in item:
                        seen.append("object")
            for pid in (os.getpid(), os.getppid()):
                for name in ("environ", "cmdline"):
                    if ANSWER.encode() in open(f"/proc/{pid}/{name}", "rb").read():
                        seen.append(f"{name} of {pid}")
                memory = _memory(pid)
                if isinstance(memory, str):
                    seen.append(memory)
                elif memory.count(ANSWER.encode()) > (1 if pid == os.getpid() else 0):
                    seen.append("memory of the host" if pid != os.getpid() else "own memory")
                elif memory.count(LABEL.encode()) > (1 if pid == os.getpid() else 0):
                    seen.append("a label in memory")
            return sorted(set(seen)) or "nothing"
    """
    request = subject_request(tmp_path, source, [case("kiwi-5521-label", "subject:search", expect="zebra-7391-answer")])
    got = failed(plugin.grade(request))
    assert got == {"kiwi-5521-label": 'returned "nothing"'}


def _process_with_argument(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state != "Z":
            found.append(int(entry))
    return found


@pytest.mark.parametrize("how", ["child", "daemon"])
def test_a_process_left_running_is_named_killed_and_the_verdict_refused(tmp_path: Path, how: str) -> None:
    marker = f"{os.getpid()}{how}".replace("child", "1").replace("daemon", "2")
    source = f"""
        import os, subprocess, sys, time

        def leave_child():
            subprocess.Popen(["sleep", "{marker}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            return 1

        def leave_daemon():
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    os.environ.clear()
                    os.execvp("sleep", ["sleep", "{marker}"])
                os._exit(0)
            deadline = time.monotonic() + 30  # until the daemon runs sleep (a fixed 0.2 s could pass first, loaded)
            while time.monotonic() < deadline and not running("{marker}"):
                time.sleep(0.02)
            return 1

        def running(marker):
            for entry in os.listdir("/proc"):
                try:
                    if entry.isdigit() and marker.encode() in open("/proc/" + entry + "/cmdline", "rb").read():
                        return True
                except OSError:
                    pass
            return False
    """
    request = subject_request(tmp_path, source, [case("leaves", f"subject:leave_{how}", expect=1)])
    with pytest.raises(plugin.VerdictRefused) as refused:
        plugin.grade(request)
    assert "left 1 process(es) running" in refused.value.message
    assert f"sleep {marker}" in refused.value.message
    assert "verdict is refused" in refused.value.message
    time.sleep(0.2)
    assert _process_with_argument(f"sleep {marker}") == []


def test_a_case_that_never_returns_is_killed_and_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plugin, "CASE_TIMEOUT_S", 1.0)
    source = """
        import os

        def forever():
            while True:
                pass

        def vanish():
            os._exit(0)

        def fine():
            return 2
    """
    request = subject_request(
        tmp_path,
        source,
        [
            case("forever", "subject:forever", expect=1),
            case("vanish", "subject:vanish", expect=1),
            case("fine", "subject:fine", expect=2),
        ],
    )
    started = time.monotonic()
    result = plugin.grade(request)
    assert time.monotonic() - started < 8
    assert failed(result) == {
        "forever": "did not return in time (killed)",
        "vanish": "the case process exited with status 0 before answering",
    }


def test_a_module_that_does_not_import_or_lacks_the_function_fails_its_cases(tmp_path: Path) -> None:
    broken = subject_request(
        tmp_path / "broken", "raise RuntimeError('at import')\n", [case("a", "subject:f", expect=1)]
    )
    assert failed(plugin.grade(broken)) == {"a": "its module could not be imported (raised RuntimeError)"}
    missing = subject_request(tmp_path / "missing", "def g():\n    return 1\n", [case("a", "subject:f", expect=1)])
    assert failed(plugin.grade(missing)) == {"a": "subject has no f"}


def test_the_scoring_copy_is_outside_the_experiment_and_deleted_after_the_last_case(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = """
        import os

        def where():
            return os.getcwd()
    """
    request = subject_request(tmp_path, source, [case("where", "subject:where", expect="")])
    scratch_root = tmp_path / "scratch"
    scratch_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch_root))
    got = failed(plugin.grade(request))["where"]
    copy = Path(json.loads(got.removeprefix("returned ")))
    assert copy.name == "tree" and copy.parent.parent == scratch_root
    assert not copy.exists() and list(scratch_root.iterdir()) == []
    inside = tmp_path / "family" / "cases" / "tmp"
    inside.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(inside))
    with pytest.raises(plugin.VerdictRefused, match="point TMPDIR outside the experiment directory"):
        plugin.grade(request)


def _lock_over(tmp_path: Path, request: GradeRequest) -> tuple[AcceptanceLock, Path]:
    from certlab_acceptance.fingerprints import fingerprint

    scorer = tmp_path / "scorer-copy"
    shutil.copytree(Path(plugin.__file__).parent, scorer, ignore=shutil.ignore_patterns("__pycache__"))
    copy = tmp_path / "locked.jsonl"
    shutil.copy(request.family.cases_file, copy)
    sources = {"cases": request.family.cases_file, "scorer:acceptance": str(scorer)}
    from certlab_acceptance.cases import cases_sha256

    lock = AcceptanceLock(
        cases_file=str(copy),
        cases_sha256=cases_sha256(copy.read_bytes()),
        fingerprints=fingerprint(sources),
        sources=sources,
        experiment_dir=str(tmp_path / "family"),
    )
    return lock, scorer


def test_with_a_lock_the_score_comes_from_the_locked_copy_and_any_movement_refuses(tmp_path: Path) -> None:
    source = "def one():\n    return 1\n"
    plain = subject_request(tmp_path, source, [case("one", "subject:one", expect=1)])
    lock, scorer = _lock_over(tmp_path, plain)
    request = GradeRequest(
        workdir=plain.workdir, family=plain.family, defect=plain.defect, issued=plain.issued, acceptance_lock=lock
    )
    assert plugin.grade(request).passed
    # the task's own file is edited after the lock: scoring is refused, naming it
    Path(plain.family.cases_file).write_text(json.dumps(case("one", "subject:one", expect=2)) + "\n")
    with pytest.raises(Exception, match="before scoring: moved since the lock: the held-out cases file changed"):
        plugin.grade(request)
    Path(plain.family.cases_file).write_bytes(Path(lock.cases_file).read_bytes())
    (scorer / "plugin.py").write_text("# edited\n")
    with pytest.raises(Exception, match=r"the scorer's file plugin.py \(grader acceptance\) changed"):
        plugin.grade(request)


def test_a_malformed_cases_file_is_one_line_naming_the_file_and_the_line(tmp_path: Path) -> None:
    request = subject_request(tmp_path, "def one():\n    return 1\n", [case("one", "subject:one", expect=1)])
    with open(request.family.cases_file, "a") as handle:
        handle.write('{"id": "two", "call": "subject:one", "expect": 1, "raises": "X"}\n')
    with pytest.raises(Exception) as error:
        plugin.grade(request)
    message = str(error.value)
    assert message.startswith(f"{request.family.cases_file}:2: ") and "\n" not in message


def test_asked_for_the_first_failure_alone_it_stops_at_the_first_case_that_does_not_hold(tmp_path: Path) -> None:
    family = installed_plugins().get("task_families", "intervals")
    defect = next(d for d in family.defects if d.id == "clamp-to-end")
    work = tmp_path / "work"
    issued = materialise(family, defect, work)
    request = GradeRequest(workdir=str(work), family=family, defect=defect, issued=issued)
    full, first = plugin.grade(request), plugin.grade(attrs.evolve(request, first_failure=True))
    assert (
        (first.passed, first.failure_mode) == (full.passed, full.failure_mode) == (False, fm.OVERFIT_TO_VISIBLE_TESTS)
    )
    assert len(full.data["failed"]) == 2 and len(first.data["failed"]) == 1
    assert first.data["cases"] < full.data["cases"]
