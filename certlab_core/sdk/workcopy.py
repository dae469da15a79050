"""Work copies: materialise a tree, hash it, record what an agent changed."""

from __future__ import annotations

import base64
import errno
import fnmatch
import hashlib
import os
import stat
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from certlab_core.plugin.errors import InstrumentError
from certlab_core.plugin.types.family import Defect, TaskFamily
from certlab_core.plugin.types.grader import Change
from certlab_core.sdk.trees import WORK_COPY_CAPS, TreeCaps, TreeTooLarge, remove_at, walk
from certlab_core.sdk.trees import copy_tree as _copy_bounded

CHANGE_KINDS = ("added", "modified", "deleted", "symlink", "hardlink")


def in_allowed_paths(relpath: str, patterns: Iterable[str]) -> bool:
    """Whether ``relpath`` matches one of a family's ``allowed_paths``, folder by folder.

    Each ``/``-separated part of a pattern is an ``fnmatch`` pattern for one part of the path, so
    ``*`` never crosses a folder: ``ledger/*.py`` allows ``ledger/models.py`` but not
    ``ledger/models/__init__.py`` (a package planted there would shadow the module). A part ``**``
    matches any number of folders.
    """
    parts = relpath.split("/")
    return any(_parts_match(parts, pattern.strip("/").split("/")) for pattern in patterns)


def _parts_match(parts: Sequence[str], pattern: Sequence[str]) -> bool:
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(_parts_match(parts[skip:], pattern[1:]) for skip in range(len(parts) + 1))
    return bool(parts) and fnmatch.fnmatchcase(parts[0], pattern[0]) and _parts_match(parts[1:], pattern[1:])


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
    """Write the issued tree (clean, or seeded with ``defect``) to ``dest``; return {relpath: sha256}.

    ``__pycache__`` folders are left out. A tree past the work copy's caps (:data:`WORK_COPY_CAPS`)
    is refused: no trial could be issued it.
    """
    try:
        _copy_bounded(family.tree_dir, dest, skip=("__pycache__",))
    except TreeTooLarge as error:
        raise InstrumentError(
            f"family {family.name}: its tree holds {error.message}, past what a work copy may hold"
        ) from None
    if defect is not None:
        for relpath, data in apply_seeds(family, defect).items():
            (dest / relpath).write_bytes(data)
    return tree_hashes(dest)


def iter_tree(root: Path, caps: TreeCaps = WORK_COPY_CAPS) -> Iterable[tuple[str, Path]]:
    """Every file and symlink below ``root`` (not following links), as (posix relpath, path), sorted.

    The walk is iterative and bounded (:func:`certlab_core.sdk.trees.walk`): a tree past
    ``caps`` raises :class:`~certlab_core.sdk.trees.TreeTooLarge`, never ``RecursionError``.
    """
    return sorted((e.relpath, e.path) for e in walk(root, caps) if e.kind != "folder")


def tree_hashes(root: Path, caps: TreeCaps = WORK_COPY_CAPS) -> dict[str, str]:
    """{relpath: sha256} of the regular files below root (symlinks hash their target text)."""
    hashes: dict[str, str] = {}
    for relpath, path in iter_tree(root, caps):
        if path.is_symlink():
            hashes[relpath] = "symlink:" + hashlib.sha256(os.readlink(path).encode()).hexdigest()
        else:
            hashes[relpath] = sha256_file(path)
    return hashes


ENVIRONMENT_CAPS = TreeCaps(max_bytes=1 << 30, max_files=100_000)
"""The totals a task environment (a venv) may reach when it is hashed."""


def environment_sha256(folder: Path) -> str:
    """One hash over a task environment as it is on disk now: its ``pyvenv.cfg`` and every installed file.

    Bytecode (``__pycache__``, ``*.pyc``) is left out; a missing environment hashes as ``missing``.
    """
    if not (folder / "pyvenv.cfg").is_file():
        return "missing"
    digest = hashlib.sha256()
    try:
        for relpath, path in iter_tree(folder, ENVIRONMENT_CAPS):
            if "__pycache__" in relpath.split("/") or relpath.endswith(".pyc"):
                continue
            shown = "symlink:" + os.readlink(path) if path.is_symlink() else sha256_file(path)
            digest.update(f"{relpath} {shown}\n".encode())
    except TreeTooLarge as error:
        raise InstrumentError(f"{folder}: the task environment holds {error.message}, past what is hashed") from None
    return digest.hexdigest()


def taskset_sha256(family: TaskFamily) -> str:
    """One hash over the clean tree, the prompt, the cases and the defect table of a family, and, for a task
    that has them, its known answer (``answer_dir``) and its environment as it is on disk now."""
    digest = hashlib.sha256()
    for relpath, sha in sorted(tree_hashes(Path(family.tree_dir)).items()):
        digest.update(f"tree {relpath} {sha}\n".encode())
    if family.answer_dir is not None:
        for relpath, sha in sorted(tree_hashes(Path(family.answer_dir)).items()):
            digest.update(f"answer {relpath} {sha}\n".encode())
    if family.environment_dir is not None:
        digest.update(f"environment {environment_sha256(Path(family.environment_dir))}\n".encode())
    for label, file in (("prompt", family.prompt_file), ("cases", family.cases_file)):
        digest.update(f"{label} {sha256_file(Path(file))}\n".encode())
    for defect in family.defects:
        for seed in defect.seeds:
            digest.update(f"seed {defect.id} {defect.defect_class} {seed.path}\n".encode())
            digest.update(hashlib.sha256(seed.find.encode()).digest())
            digest.update(hashlib.sha256(seed.replace.encode()).digest())
    return digest.hexdigest()


DEFAULT_FILE_CAP = 10 << 20
"""The largest file whose content a recorded change holds; a larger one is recorded as its size and sha256 only."""
DEFAULT_TOTAL_CAP = 20 << 20
"""The most content one trial's changes hold; a change past it is recorded as its size and sha256 only."""
_BLOCK = 1 << 20


class Tampered(InstrumentError):
    """A recorded change that no work copy could have produced: it would write outside the tree, or not as a file."""


def _read_capped(path: Path, cap: int) -> tuple[str, int, bytes | None]:
    """(sha256, size, content or None when larger than ``cap``) of a regular file, read once, without following
    a link and never holding more than ``cap`` bytes."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        digest = hashlib.sha256()
        kept: list[bytes] | None = []
        size = 0
        for block in iter(lambda: handle.read(_BLOCK), b""):
            digest.update(block)
            size += len(block)
            if kept is not None:
                kept.append(block)
                if size > cap:
                    kept = None
    return digest.hexdigest(), size, b"".join(kept) if kept is not None else None


def record_changes(
    root: Path,
    issued: Mapping[str, str],
    file_cap: int = DEFAULT_FILE_CAP,
    total_cap: int = DEFAULT_TOTAL_CAP,
    caps: TreeCaps = WORK_COPY_CAPS,
) -> list[Change]:
    """Every path that differs from what was issued, with content enough to re-apply it exactly.

    A file larger than ``file_cap``, or one whose content would take the trial's recorded content
    past ``total_cap``, is recorded as its sha256 and size with no content (``omitted``): memory
    stays bounded whatever an agent writes, and the policy grader fails such a trial
    (``policy-oversized-change``). Anything but a regular file or a symlink is not recorded.
    A tree past the work copy's totals (``caps``: bytes, files, depth) raises
    :class:`~certlab_core.sdk.trees.TreeTooLarge` before anything is read; the kernel checks
    them first, and charges the trial as ``agent-resource-limit``.
    """
    changes: list[Change] = []
    present: set[str] = set()
    total = 0
    for relpath, path in iter_tree(root, caps):
        present.add(relpath)
        try:
            st = path.lstat()
        except OSError:
            continue
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(path).encode()
            sha = "symlink:" + hashlib.sha256(target).hexdigest()
            if issued.get(relpath) != sha:
                total += len(target)
                changes.append(
                    Change(
                        relpath,
                        "symlink",
                        hashlib.sha256(target).hexdigest(),
                        base64.b64encode(target).decode(),
                        size=len(target),
                    )
                )
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        try:
            sha, size, data = _read_capped(path, file_cap)
        except OSError:
            continue
        if st.st_nlink > 1:
            kind = "hardlink"
        elif relpath not in issued:
            kind = "added"
        elif issued[relpath] != sha:
            kind = "modified"
        else:
            continue
        if data is not None and total + size <= total_cap:
            total += size
            changes.append(Change(relpath, kind, sha, base64.b64encode(data).decode(), size=size))
        else:
            changes.append(Change(relpath, kind, sha, None, size=size, omitted=True))
    for relpath in sorted(set(issued) - present):
        changes.append(Change(relpath, "deleted", None, None))
    return sorted(changes, key=lambda c: c.path)


def oversized(changes: Iterable[Change]) -> list[Change]:
    """The changes recorded without their content because they were past a cap."""
    return [change for change in changes if change.omitted]


def _parts(relpath: str, caps: TreeCaps = WORK_COPY_CAPS) -> list[str]:
    if len(relpath) > caps.max_path or relpath.count("/") >= caps.max_depth:
        shown = relpath if len(relpath) <= 80 else relpath[:40] + "..." + relpath[-37:]
        raise Tampered(
            f"a recorded change names a path {relpath.count('/') + 1} levels deep, {len(relpath)} characters long "
            f"({shown}); no work copy holds one past {caps.max_depth} levels or {caps.max_path} characters"
        )
    parts = relpath.split("/")
    if not relpath or relpath.startswith("/") or "\0" in relpath or any(p in ("", ".", "..") for p in parts):
        raise Tampered(f"a recorded change names the path {relpath!r}, which leaves the work copy")
    return parts


def _parent_fd(root_fd: int, relpath: str, parts: Sequence[str], create: bool) -> int | None:
    """A descriptor of the folder holding ``parts[-1]``, reached without following a link (None: it is not there)."""
    fd = os.dup(root_fd)
    try:
        for index, name in enumerate(parts[:-1]):
            try:
                mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
            except FileNotFoundError:
                if not create:
                    os.close(fd)
                    return None
                os.mkdir(name, 0o755, dir_fd=fd)
                mode = stat.S_IFDIR
            if not stat.S_ISDIR(mode):
                what = "a symlink" if stat.S_ISLNK(mode) else "not a folder"
                raise Tampered(
                    f"a recorded change to {relpath} passes through {'/'.join(parts[: index + 1])}, which is {what}; "
                    "it would be written outside the work copy"
                )
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _clear(fd: int, name: str, relpath: str) -> None:
    """Remove what the tree holds at ``name`` in the folder ``fd`` (a link itself, never its target)."""
    try:
        mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        if not remove_at(fd, name):
            raise OSError(errno.ENOTEMPTY, f"the folder {relpath} could not be removed")
    elif stat.S_ISREG(mode) or stat.S_ISLNK(mode):
        os.unlink(name, dir_fd=fd)
    else:
        raise Tampered(f"a recorded change to {relpath} meets a special file; the tree is not one certlab issued")


def _write_new(fd: int, name: str, data: bytes) -> None:
    out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=fd)
    with os.fdopen(out, "wb") as handle:
        handle.write(data)


def _write_stand_in(fd: int, name: str, size: int) -> None:
    """A sparse file of the recorded size (at most one byte past the file cap) for a change kept without content."""
    out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=fd)
    try:
        os.ftruncate(out, min(size, DEFAULT_FILE_CAP + 1))
    finally:
        os.close(out)


def write_inside(root: Path, relpath: str, data: bytes) -> None:
    """Write ``data`` at ``relpath`` below ``root`` with no-follow semantics (for a reader materialising a file)."""
    parts = _parts(relpath)
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = _parent_fd(root_fd, relpath, parts, create=True)
        assert fd is not None
        try:
            _clear(fd, parts[-1], relpath)
            _write_new(fd, parts[-1], data)
        finally:
            os.close(fd)
    finally:
        os.close(root_fd)


def check_recorded(changes: Sequence[Change], caps: TreeCaps = WORK_COPY_CAPS) -> None:
    """Refuse, as :class:`Tampered`, recorded changes no work copy within ``caps`` could give.

    More changes than it holds files, or a path that leaves it or is deeper or longer than one
    it holds: certlab never records one, so a bundle that does was edited. Nothing is read or
    written; a reader checks every trial this way before it runs any of them.
    """
    if len(changes) > caps.max_files:
        raise Tampered(f"the recorded changes name {len(changes)} paths; no work copy holds more than {caps.max_files}")
    for change in changes:
        _parts(change.path, caps)


def apply_changes(root: Path, changes: Iterable[Change], link_dir: Path | None = None) -> None:
    """Re-apply recorded changes to a freshly issued tree, exactly (links as links), only inside ``root``.

    Nothing is followed: a change whose path is absolute, holds ``..``, or passes through a
    symlink or a file is refused as :class:`Tampered` (exit 3), as is one that meets a special
    file. A change kept without content (past a cap) is re-applied as a sparse stand-in of its
    size, which the policy grader fails the same way. More changes than a work copy holds
    files, or a path deeper or longer than one holds (:data:`WORK_COPY_CAPS`), is refused as
    tampered before anything is written: certlab never records one.
    """
    listed = list(changes)
    check_recorded(listed)
    paths = [c.path for c in listed]
    if len(set(paths)) != len(paths):
        twice = sorted({p for p in paths if paths.count(p) > 1})
        raise Tampered(f"the recorded changes name {twice[0]!r} more than once; no work copy records a path twice")
    # Deletions first, on the tree as issued: a genuine deletion never passes a link then (a
    # folder the agent replaced by a link is deleted below before the link is made).
    ordered = [c for c in listed if c.kind == "deleted"] + [c for c in listed if c.kind != "deleted"]
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for change in ordered:
            try:
                _apply_one(root_fd, change, link_dir)
            except OSError as error:
                raise Tampered(
                    f"the recorded change to {change.path!r} cannot be applied to a tree as issued ({error.strerror})"
                ) from None
    finally:
        os.close(root_fd)


def _apply_one(root_fd: int, change: Change, link_dir: Path | None) -> None:
    if change.kind not in CHANGE_KINDS:
        raise Tampered(f"a recorded change to {change.path} has the unknown kind {change.kind!r}")
    parts = _parts(change.path)
    fd = _parent_fd(root_fd, change.path, parts, create=change.kind != "deleted")
    if fd is None:
        return
    name = parts[-1]
    try:
        _clear(fd, name, change.path)
        if change.kind == "deleted":
            return
        if change.omitted:
            if change.kind == "symlink" or change.size is None or change.size < 0:
                raise Tampered(f"the recorded change to {change.path} has no content and no size to stand in for it")
            _write_stand_in(fd, name, change.size)
        else:
            try:
                data = base64.b64decode(change.content_b64 or "", validate=True)
            except ValueError:
                raise Tampered(f"the recorded change to {change.path} is not base64") from None
            if hashlib.sha256(data).hexdigest() != change.sha256:
                raise Tampered(f"the recorded change to {change.path} does not match its own sha256")
            if change.kind == "symlink":
                try:
                    os.symlink(data.decode(), name, dir_fd=fd)
                except (UnicodeDecodeError, ValueError):
                    raise Tampered(f"the recorded symlink {change.path} has a target that is no path") from None
                return
            _write_new(fd, name, data)
        if change.kind == "hardlink":
            holder = link_dir or Path(tempfile.mkdtemp(prefix="certlab-link-"))
            os.link(
                name,
                holder / f"link-{hashlib.sha256(change.path.encode()).hexdigest()[:12]}",
                src_dir_fd=fd,
                follow_symlinks=False,
            )
    finally:
        os.close(fd)


def copy_tree(src: Path, dest: Path, caps: TreeCaps = WORK_COPY_CAPS) -> None:
    """A plain copy of a work tree (links kept as links, special files left out), for a grader that must not touch
    the original; iterative and bounded (past ``caps``: :class:`~certlab_core.sdk.trees.TreeTooLarge`)."""
    _copy_bounded(src, dest, caps)
