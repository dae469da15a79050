"""Work copies: whatever an agent does to a tree, the recorded changes re-apply to the same tree, links included."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from certlab_core.plugin.errors import InstrumentError
from certlab_core.plugin.types.grader import Change
from certlab_core.sdk.workcopy import apply_changes, in_allowed_paths, record_changes, tree_hashes

NAMES = st.sampled_from(["a.py", "b.txt", "pkg/c.py", "pkg/d.bin", "tests/test_x.py", "new/deep/e.py"])
ACTIONS = st.lists(
    st.tuples(st.sampled_from(["write", "delete", "symlink", "hardlink"]), NAMES, st.binary(max_size=64)),
    max_size=8,
)


def issue(root: Path) -> dict[str, str]:
    for name, data in {"a.py": b"x = 1\n", "b.txt": b"hello\n", "pkg/c.py": b"", "tests/test_x.py": b"t\n"}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return tree_hashes(root)


def act(root: Path, outside: Path, actions: list[tuple[str, str, bytes]]) -> None:
    for kind, name, data in actions:
        path = root / name
        if path.is_symlink() or path.is_file():
            path.unlink()
        if kind == "delete":
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if kind == "write":
            path.write_bytes(data)
        elif kind == "symlink":
            os.symlink(data.hex() or "target", path)
        else:
            path.write_bytes(data)
            os.link(path, outside / f"link{len(list(outside.iterdir()))}")


def snapshot(root: Path) -> dict[str, tuple[str, bytes]]:
    found: dict[str, tuple[str, bytes]] = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                found[rel] = ("symlink", os.readlink(path).encode())
            else:
                found[rel] = ("hardlink" if path.stat().st_nlink > 1 else "file", path.read_bytes())
    for dirpath, dirs, _files in os.walk(root):
        for name in dirs:
            path = Path(dirpath) / name
            if path.is_symlink():
                found[path.relative_to(root).as_posix()] = ("symlink", os.readlink(path).encode())
    return found


@settings(max_examples=80, deadline=None)
@given(actions=ACTIONS)
def test_recorded_changes_reapply_exactly(actions: list[tuple[str, str, bytes]]) -> None:
    scratch = Path(tempfile.mkdtemp())
    try:
        agent_tree, outside, replay_tree, links = (scratch / n for n in ("agent", "outside", "replay", "links"))
        for folder in (agent_tree, outside, replay_tree, links):
            folder.mkdir()
        issued = issue(agent_tree)
        act(agent_tree, outside, actions)
        changes = record_changes(agent_tree, issued)
        issue(replay_tree)
        apply_changes(replay_tree, changes, links)
        assert snapshot(replay_tree) == snapshot(agent_tree)
        assert record_changes(replay_tree, issued) == changes
    finally:
        shutil.rmtree(scratch)


def test_a_change_may_not_leave_the_tree(tmp_path: Path) -> None:
    for path in ("../escape.py", "/etc/passwd", "a/../../b"):
        with pytest.raises(InstrumentError, match="leaves the work copy"):
            apply_changes(tmp_path, [Change(path, "added", None, "")])


def test_a_change_that_contradicts_its_hash_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InstrumentError, match="does not match its own sha256"):
        apply_changes(tmp_path, [Change("a.py", "added", "0" * 64, "eA==")])


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        ("ledger/models.py", True),
        ("ledger/models/__init__.py", False),  # a package that would shadow ledger/models.py
        ("ledger.py", False),
        ("other/ledger/models.py", False),
        ("deep/a/b/c.py", True),
        ("deep/c.py", True),
        ("deep/a/c.txt", False),
    ],
)
def test_an_allowed_path_pattern_matches_folder_by_folder(path: str, allowed: bool) -> None:
    assert in_allowed_paths(path, ["ledger/*.py", "deep/**/*.py"]) is allowed
