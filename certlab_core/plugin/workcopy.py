"""Work copies: materialise an issued tree, hash it, and record exactly what an agent changed in it."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from attrs import frozen

from certlab_core.plugin.errors import InstrumentError
from certlab_core.plugin.records import Defect, TaskFamily

CHANGE_KINDS = ("added", "modified", "deleted", "symlink", "hardlink")


@frozen
class Change:
    """One path an agent changed. ``content_b64`` is the new bytes (a symlink's target for
    ``symlink``), None for ``deleted``; ``sha256`` is of those bytes."""

    path: str
    kind: str
    sha256: str | None
    content_b64: str | None


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()


def apply_seeds(family: TaskFamily, defect: Defect) -> dict[str, bytes]:
    """The seeded contents of the files a defect touches; each ``find`` must occur exactly once."""
    contents: dict[str, str] = {}
    for seed in defect.seeds:
        if seed.path not in contents:
            source = Path(family.tree_dir) / seed.path
            if not source.is_file():
                raise InstrumentError(
                    f"family {family.name}: defect {defect.id} seeds {seed.path}, which is not in the clean tree"
                )
            contents[seed.path] = source.read_text(encoding="utf-8")
        count = contents[seed.path].count(seed.find)
        if count != 1:
            raise InstrumentError(
                f"family {family.name}: defect {defect.id}: the text to seed occurs {count} times in "
                f"{seed.path} (it must occur exactly once); fix the family's defect table"
            )
        contents[seed.path] = contents[seed.path].replace(seed.find, seed.replace)
    return {path: text.encode("utf-8") for path, text in contents.items()}


def materialise(family: TaskFamily, defect: Defect | None, dest: Path) -> dict[str, str]:
    """Write the issued tree (clean, or seeded with ``defect``) to ``dest``; return {relpath: sha256}."""
    shutil.copytree(family.tree_dir, dest, symlinks=True, dirs_exist_ok=True)
    for junk in list(dest.rglob("__pycache__")):
        shutil.rmtree(junk, ignore_errors=True)
    if defect is not None:
        for relpath, data in apply_seeds(family, defect).items():
            (dest / relpath).write_bytes(data)
    return tree_hashes(dest)


def iter_tree(root: Path) -> Iterable[tuple[str, Path]]:
    """Every file and symlink below ``root`` (not following links), as (posix relpath, path), sorted."""
    found: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(dirpath)
        for name in list(dirnames):
            if (base / name).is_symlink():
                filenames.append(name)
                dirnames.remove(name)
        for name in filenames:
            path = base / name
            found.append((path.relative_to(root).as_posix(), path))
    return sorted(found)


def tree_hashes(root: Path) -> dict[str, str]:
    """{relpath: sha256} of the regular files below root (symlinks hash their target text)."""
    hashes: dict[str, str] = {}
    for relpath, path in iter_tree(root):
        if path.is_symlink():
            hashes[relpath] = "symlink:" + hashlib.sha256(os.readlink(path).encode()).hexdigest()
        else:
            hashes[relpath] = sha256_file(path)
    return hashes


def taskset_sha256(family: TaskFamily) -> str:
    """One hash over the clean tree, the prompt, the cases and the defect table of a family."""
    digest = hashlib.sha256()
    for relpath, sha in sorted(tree_hashes(Path(family.tree_dir)).items()):
        digest.update(f"tree {relpath} {sha}\n".encode())
    for label, file in (("prompt", family.prompt_file), ("cases", family.cases_file)):
        digest.update(f"{label} {sha256_file(Path(file))}\n".encode())
    for defect in family.defects:
        for seed in defect.seeds:
            digest.update(f"seed {defect.id} {defect.defect_class} {seed.path}\n".encode())
            digest.update(hashlib.sha256(seed.find.encode()).digest())
            digest.update(hashlib.sha256(seed.replace.encode()).digest())
    return digest.hexdigest()


def record_changes(root: Path, issued: Mapping[str, str]) -> list[Change]:
    """Every path that differs from what was issued, with content enough to re-apply it exactly."""
    changes: list[Change] = []
    present: set[str] = set()
    for relpath, path in iter_tree(root):
        present.add(relpath)
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(path).encode()
            sha = "symlink:" + hashlib.sha256(target).hexdigest()
            if issued.get(relpath) != sha:
                changes.append(
                    Change(relpath, "symlink", hashlib.sha256(target).hexdigest(), base64.b64encode(target).decode())
                )
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        data = path.read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        if st.st_nlink > 1:
            changes.append(Change(relpath, "hardlink", sha, base64.b64encode(data).decode()))
        elif relpath not in issued:
            changes.append(Change(relpath, "added", sha, base64.b64encode(data).decode()))
        elif issued[relpath] != sha:
            changes.append(Change(relpath, "modified", sha, base64.b64encode(data).decode()))
    for relpath in sorted(set(issued) - present):
        changes.append(Change(relpath, "deleted", None, None))
    return sorted(changes, key=lambda c: c.path)


def _safe_target(root: Path, relpath: str) -> Path:
    if relpath.startswith("/") or ".." in Path(relpath).parts or not relpath:
        raise InstrumentError(f"a recorded change names the path {relpath!r}, which leaves the work copy")
    return root / relpath


def apply_changes(root: Path, changes: Iterable[Change], link_dir: Path | None = None) -> None:
    """Re-apply recorded changes to a freshly issued tree, exactly (links as links)."""
    for change in changes:
        if change.kind not in CHANGE_KINDS:
            raise InstrumentError(f"a recorded change to {change.path} has the unknown kind {change.kind!r}")
        target = _safe_target(root, change.path)
        if target.is_symlink() or target.is_file():
            target.unlink()
        elif target.is_dir() and change.kind != "deleted":
            shutil.rmtree(target)
        if change.kind == "deleted":
            if target.is_dir():
                shutil.rmtree(target)
            continue
        data = base64.b64decode(change.content_b64 or "", validate=True)
        if hashlib.sha256(data).hexdigest() != change.sha256:
            raise InstrumentError(f"the recorded change to {change.path} does not match its own sha256")
        target.parent.mkdir(parents=True, exist_ok=True)
        if change.kind == "symlink":
            os.symlink(data.decode(), target)
            continue
        target.write_bytes(data)
        if change.kind == "hardlink":
            holder = link_dir or Path(tempfile.mkdtemp(prefix="certlab-link-"))
            os.link(target, holder / f"link-{hashlib.sha256(change.path.encode()).hexdigest()[:12]}")


def copy_tree(src: Path, dest: Path) -> None:
    """A plain copy of a work tree (links kept as links), for a grader that must not touch the original."""
    shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True)
