"""The held-out cases reader: every malformed line is one clear message naming the file and the line."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from certlab_acceptance.cases import check_modules, parse_cases, read_cases
from hypothesis import given, settings
from hypothesis import strategies as st

from certlab_core.plugin.errors import UsageError

GOOD = '{"id": "ok", "call": "mod:f", "args": [1], "expect": 2}'


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("{not json", "not a JSON line"),
        ("[1, 2]", "the line is a JSON list, not an object"),
        ('{"id": "a", "call": "mod:f", "expect": 1, "extra": 2}', "unknown key(s) 'extra'"),
        ('{"call": "mod:f", "expect": 1}', "'id' must be a non-empty string"),
        ('{"id": "  ", "call": "mod:f", "expect": 1}', "'id' must be a non-empty string"),
        ('{"id": "a", "call": "mod.f", "expect": 1}', "'call' must read 'module:function'"),
        ('{"id": "a", "call": "mod:f; import os", "expect": 1}', "'call' must read 'module:function'"),
        ('{"id": "a", "call": "mod:f", "args": {"x": 1}, "expect": 1}', "'args' must be a list"),
        ('{"id": "a", "call": "mod:f", "kwargs": [1], "expect": 1}', "'kwargs' must be an object"),
        (
            '{"id": "a", "call": "mod:f", "expect": 1, "raises": "ValueError"}',
            "give exactly one of 'expect' and 'raises'",
        ),
        ('{"id": "a", "call": "mod:f"}', "give exactly one of 'expect' and 'raises'"),
        ('{"id": "a", "call": "mod:f", "raises": "not a name"}', "'raises' must be an exception class name"),
        ('{"id": "a", "call": "mod:f", "expect": NaN}', "not a JSON line (NaN is not JSON)"),
    ],
)
def test_a_malformed_line_names_the_file_and_the_line(tmp_path: Path, line: str, says: str) -> None:
    path = tmp_path / "cases" / "acceptance.jsonl"
    path.parent.mkdir()
    path.write_text(f"{GOOD}\n\n{line}\n", encoding="utf-8")
    with pytest.raises(UsageError) as error:
        read_cases(path)
    message = error.value.message
    assert message.startswith(f"{path}:3: "), message
    assert says in message
    assert "\n" not in message
    assert error.value.exit_code == 4


def test_a_repeated_id_names_both_lines(tmp_path: Path) -> None:
    path = tmp_path / "acceptance.jsonl"
    path.write_text(f"{GOOD}\n{GOOD.replace('2}', '3}')}\n", encoding="utf-8")
    with pytest.raises(UsageError, match=r"acceptance.jsonl:2: the case id 'ok' was already used on line 1"):
        read_cases(path)


def test_bytes_that_are_not_utf8_name_their_line(tmp_path: Path) -> None:
    path = tmp_path / "acceptance.jsonl"
    path.write_bytes(GOOD.encode() + b"\n" + b'{"id": "\xff"}\n')
    with pytest.raises(UsageError, match=r"acceptance.jsonl:2: not UTF-8 text"):
        read_cases(path)


def test_an_empty_or_missing_file_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(UsageError, match="no held-out case in the file"):
        read_cases(empty)
    with pytest.raises(UsageError, match="the held-out cases file does not exist"):
        read_cases(tmp_path / "missing.jsonl")


@pytest.mark.parametrize("kind", ["fifo", "device", "folder"])
def test_a_cases_file_that_is_no_regular_file_is_one_line_and_never_blocks(tmp_path: Path, kind: str) -> None:
    # Before: a FIFO named as the cases file (a task's certlab.yaml names it) blocked the read for good,
    # and /dev/zero was read until memory ran out.
    path = tmp_path / "acceptance.jsonl"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    said = {"fifo": "a FIFO", "device": "a device", "folder": "a directory"}[kind]
    raised: list[str] = []

    def read() -> None:
        with pytest.raises(UsageError) as refused:
            read_cases(path)
        raised.append(refused.value.message)

    reader = threading.Thread(target=read)
    reader.daemon = True  # the reader of a FIFO with no writer blocks for good: it must not hold the run
    reader.start()
    reader.join(timeout=20)
    assert not reader.is_alive(), "reading the cases file blocked"
    assert raised == [f"{path}: {said}, not a regular file; give the held-out cases file as a file"]


def test_a_cases_file_over_16_mb_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "acceptance.jsonl"
    with path.open("wb") as handle:
        handle.truncate((16 << 20) + 1)
    with pytest.raises(UsageError, match="more than the 16 MB a held-out cases file may hold"):
        read_cases(path)


def test_a_call_outside_the_code_under_test_is_refused(tmp_path: Path) -> None:
    cases = parse_cases('{"id": "sys", "call": "os:system", "args": ["true"], "expect": 0}\n', "acceptance.jsonl")
    with pytest.raises(UsageError, match=r"acceptance.jsonl:1: case 'sys' calls os:system, which is not in the code"):
        check_modules(cases, ["intervals"], "acceptance.jsonl")


def test_well_formed_cases_keep_their_line_numbers_and_give_only_the_call_to_a_case_process() -> None:
    text = GOOD + "\n\n" + '{"id": "r", "call": "pkg.mod:Cls.make", "kwargs": {"x": 1}, "raises": "KeyError"}\n'
    first, second = parse_cases(text, "acceptance.jsonl")
    assert (first.line, second.line) == (1, 3)
    assert second.module == "pkg.mod" and second.function == "Cls.make" and second.raises == "KeyError"
    assert first.invocation() == {"call": "mod:f", "args": [1], "kwargs": {}}
    assert "expect" not in second.invocation() and "id" not in second.invocation()


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_text_is_read_or_refused_in_one_line(text: str) -> None:
    try:
        parse_cases(text, "fuzz.jsonl")
    except UsageError as error:
        assert error.message.startswith("fuzz.jsonl")
        assert "\n" not in error.message


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["id", "call", "args", "kwargs", "expect", "raises", "other"]),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=8), lambda c: st.lists(c, max_size=3)
        ),
        max_size=6,
    )
)
def test_any_json_object_is_read_or_refused_in_one_line(document: dict[str, object]) -> None:
    import json

    try:
        parse_cases(json.dumps(document) + "\n", "fuzz.jsonl")
    except UsageError as error:
        assert error.message.startswith("fuzz.jsonl:1: ")
        assert "\n" not in error.message
