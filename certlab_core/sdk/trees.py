"""Bounded trees: walk, copy and delete folders iteratively, with caps.

Python 3.11's ``os.walk``, ``shutil.rmtree``, ``shutil.copytree`` and ``Path.rglob`` recurse once
per level, so a tree an agent makes 3,000 levels deep raises ``RecursionError`` in each of them
(``rmtree(ignore_errors=True)`` does not catch it, and leaves the tree behind). Here:

- :func:`walk` yields every entry below a folder, depth first, each folder's entries sorted by
  name, never following a link, opening each folder by descriptor from its parent (so no path
  longer than ``PATH_MAX`` is ever needed) and holding at most one open folder per level. It
  stops with :class:`TreeTooLarge` at the first entry past a cap of :class:`TreeCaps`: the
  number of entries, the depth, the length of a path, or the bytes of the files. So a walk is
  bounded in time and memory whatever the tree holds; :func:`over_caps` says why a tree is
  past its caps, or None.
- :func:`copy_tree` copies a tree with the same walk (links kept as links, special files left out).
- :func:`make_temp_folder` and :func:`make_folder` make a folder and return a :class:`MadeFolder`,
  a handle holding the device and inode the folder had when certlab made it;
  :func:`remove_made` deletes only that folder: when what is at its path now is not it (another
  folder, a link), nothing is touched. Deletion is iterative, never crosses into another file
  system (a mount point below is left, and the removal says it did not finish), and holds at
  most :data:`OPEN_FOLDERS` folders open: a deeper folder is first moved up to the top.
  :func:`temporary_folder` is the ``with`` form.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import Literal, get_args

from attrs import field, frozen

from certlab_core.plugin.errors import UsageError
from certlab_core.plugin.types.fields import one_of

EntryKind = Literal["file", "folder", "symlink", "special"]

_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: The most folders a removal holds open at once; a folder deeper than this is moved up to the top first.
OPEN_FOLDERS = 32
_BATCH = 512  # names a removal lists from one folder at a time


@frozen
class TreeCaps:
    """The totals a tree may reach.

    ``max_bytes`` counts each regular file once per inode, at the larger of its length and the
    space it takes on disk (so a sparse file counts at its length, which is what a reader of it
    reads), plus each link's target; ``max_files`` counts every entry below the root (files,
    links, folders and special files); ``max_depth`` is the most path parts of an entry
    (``a/b/c`` is 3); ``max_path`` the longest path below the root, in characters.
    """

    max_bytes: int = 256 << 20
    max_files: int = 20_000
    max_depth: int = 64
    max_path: int = 1024

    def document(self) -> dict[str, int]:
        """The caps as the evidence records them."""
        return {
            "bytes": self.max_bytes,
            "files": self.max_files,
            "depth": self.max_depth,
            "path_chars": self.max_path,
        }


#: The caps of a trial's work copy (and of any tree a grader or reader walks): 256 MiB, 20,000 entries, 64 levels.
WORK_COPY_CAPS = TreeCaps()


class TreeTooLarge(Exception):
    """A tree past one of its caps; ``cap`` names it (bytes, files, depth or path) and the message says where."""

    def __init__(self, cap: str, message: str) -> None:
        super().__init__(message)
        self.cap = cap
        self.message = message


@frozen
class Entry:
    """One entry below a walked root: its posix path relative to the root, its kind, and its ``lstat``."""

    relpath: str
    kind: EntryKind = field(validator=one_of(get_args(EntryKind)))
    stat: os.stat_result = field(eq=False, repr=False)
    path: Path = field(eq=False, repr=False)

    @property
    def depth(self) -> int:
        return self.relpath.count("/") + 1


def _kind(mode: int) -> EntryKind:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "special"


def _shown(relpath: str) -> str:
    return relpath if len(relpath) <= 80 else relpath[:40] + "..." + relpath[-37:]


class _Totals:
    def __init__(self, caps: TreeCaps) -> None:
        self.caps = caps
        self.files = 0
        self.bytes = 0
        self.linked: set[tuple[int, int]] = set()

    def listed(self, relpath: str) -> None:
        self.files += 1
        if self.files > self.caps.max_files:
            raise TreeTooLarge(
                "files", f"more than {self.caps.max_files} files, links and folders (the cap; at {_shown(relpath)})"
            )

    def entry(self, relpath: str, st: os.stat_result) -> None:
        depth = relpath.count("/") + 1
        if depth > self.caps.max_depth:
            raise TreeTooLarge(
                "depth", f"a path {depth} levels deep (the cap is {self.caps.max_depth}): {_shown(relpath)}"
            )
        if len(relpath) > self.caps.max_path:
            raise TreeTooLarge(
                "path", f"a path of {len(relpath)} characters (the cap is {self.caps.max_path}): {_shown(relpath)}"
            )
        if stat.S_ISREG(st.st_mode):
            if st.st_nlink > 1:
                if (st.st_dev, st.st_ino) in self.linked:
                    return
                self.linked.add((st.st_dev, st.st_ino))
            self.bytes += max(st.st_size, st.st_blocks * 512)
        elif stat.S_ISLNK(st.st_mode):
            self.bytes += st.st_size
        if self.bytes > self.caps.max_bytes:
            raise TreeTooLarge(
                "bytes", f"more than {self.caps.max_bytes} bytes of files (the cap; at {_shown(relpath)})"
            )


def _listing(fd: int, prefix: str, totals: _Totals) -> list[tuple[str, os.stat_result]]:
    """The entries of the folder ``fd``, sorted by name, each counted before it is kept."""
    names: list[str] = []
    with os.scandir(fd) as entries:
        for item in entries:
            totals.listed(prefix + item.name)
            names.append(item.name)
    names.sort()
    found: list[tuple[str, os.stat_result]] = []
    for name in names:
        try:
            found.append((name, os.stat(name, dir_fd=fd, follow_symlinks=False)))
        except OSError:  # gone since it was listed
            continue
    return found


def walk(
    root: str | os.PathLike[str],
    caps: TreeCaps = WORK_COPY_CAPS,
    enter: Callable[[Entry], bool] | None = None,
) -> Iterator[Entry]:
    """Every entry below ``root``, depth first (a folder before what it holds), never following a link.

    ``root`` itself is opened as named (a link to a folder is followed there, and only there).
    A folder that cannot be opened (gone, or not readable), or for which ``enter`` says False,
    is yielded but not entered, and nothing below it is counted.
    Raises :class:`TreeTooLarge` at the first entry past a cap, having held no more than
    ``caps.max_files`` entries and ``caps.max_depth`` open folders; OSError when ``root`` is
    not a folder that can be read.
    """
    base = Path(root)
    totals = _Totals(caps)
    top = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        listed = _listing(top, "", totals)
    except BaseException:
        os.close(top)
        raise
    stack: list[tuple[int, str, Iterator[tuple[str, os.stat_result]]]] = [(top, "", iter(listed))]
    try:
        while stack:
            fd, prefix, pending = stack[-1]
            item = next(pending, None)
            if item is None:
                stack.pop()
                os.close(fd)
                continue
            name, st = item
            relpath = prefix + name
            totals.entry(relpath, st)
            kind = _kind(st.st_mode)
            entry = Entry(relpath, kind, st, base / relpath)
            yield entry
            if kind != "folder" or (enter is not None and not enter(entry)):
                continue
            try:
                child = os.open(name, _FOLDER_FLAGS, dir_fd=fd)
            except OSError:
                continue
            try:
                listed = _listing(child, relpath + "/", totals)
            except OSError:
                os.close(child)
                continue
            except BaseException:
                os.close(child)
                raise
            stack.append((child, relpath + "/", iter(listed)))
    finally:
        for fd, _prefix, _pending in stack:
            os.close(fd)


def over_caps(root: str | os.PathLike[str], caps: TreeCaps = WORK_COPY_CAPS) -> str | None:
    """Why the tree at ``root`` is past ``caps`` (or is no folder that can be read), or None when it is within them.

    Bounded as :func:`walk` is: it stops counting at the first cap passed.
    """
    try:
        for _entry in walk(root, caps):
            pass
    except TreeTooLarge as error:
        return error.message
    except OSError as error:
        return f"{os.fspath(root)} cannot be read as a folder ({error.strerror or error})"
    return None


def copy_tree(
    src: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    caps: TreeCaps = WORK_COPY_CAPS,
    skip: Collection[str] = (),
) -> None:
    """Copy the tree at ``src`` into ``dest`` (made if missing): files with their modes, links as links.

    Special files are left out, and so is every entry whose name matches a pattern of ``skip``
    (``fnmatch``: ``__pycache__``, ``*.pyc``), with all it holds. Raises :class:`TreeTooLarge`
    past ``caps``.
    """
    target = Path(dest)
    target.mkdir(parents=True, exist_ok=True)

    def kept(entry: Entry) -> bool:
        name = entry.relpath.rsplit("/", 1)[-1]
        return not any(fnmatch.fnmatchcase(name, pattern) for pattern in skip)

    for entry in walk(src, caps, enter=kept):
        if not kept(entry):
            continue
        out = target / entry.relpath
        if entry.kind == "folder":
            out.mkdir(exist_ok=True)
        elif entry.kind == "symlink":
            if out.is_symlink() or out.exists():
                out.unlink()
            os.symlink(os.readlink(entry.path), out)
        elif entry.kind == "file":
            shutil.copy2(entry.path, out, follow_symlinks=False)


# ----------------------------------------------------------------------------- folders certlab made


@frozen
class MadeFolder:
    """A folder certlab made, with the device and inode it had then: the only thing :func:`remove_made` deletes."""

    path: str
    st_dev: int
    st_ino: int

    @property
    def as_path(self) -> Path:
        return Path(self.path)


def _handle(path: str) -> MadeFolder:
    st = os.lstat(path)
    return MadeFolder(path, st.st_dev, st.st_ino)


def make_folder(path: str | os.PathLike[str], mode: int = 0o700) -> MadeFolder:
    """Make a new folder at ``path`` (FileExistsError when something is there) and return its handle."""
    os.mkdir(path, mode)
    return _handle(os.fspath(path))


def make_temp_folder(prefix: str = "certlab-", parent: str | os.PathLike[str] | None = None) -> MadeFolder:
    """A new temp folder (``tempfile.mkdtemp``), as a handle."""
    return _handle(tempfile.mkdtemp(prefix=prefix, dir=parent))


def use_temp_folder(folder: str) -> None:
    """In a forked child: every temp folder made from now on is made below ``folder``, by it and what it starts."""
    tempfile.tempdir = folder
    os.environ["TMPDIR"] = folder


@contextlib.contextmanager
def temporary_folder(prefix: str = "certlab-", parent: str | os.PathLike[str] | None = None) -> Iterator[MadeFolder]:
    """A new temp folder for the ``with`` block, removed (by :func:`remove_made`) when it ends."""
    made = make_temp_folder(prefix, parent)
    try:
        yield made
    finally:
        remove_made(made)


def remove_made(made: MadeFolder) -> bool:
    """Delete the folder certlab made and all it holds; True when it is gone (or was already).

    False, and nothing of it touched, when what is at its path is not that folder (its device
    and inode differ, or it is a link); False too when something below it could not be
    removed (another file system mounted there, a file the kernel refuses to unlink), the rest
    being removed. Never raises for a file system error, and never follows a link.
    """
    parent, name = os.path.split(made.path)
    try:
        parent_fd = os.open(parent or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        try:
            st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        except FileNotFoundError:
            return True
        except OSError:
            return False
        if not stat.S_ISDIR(st.st_mode) or (st.st_dev, st.st_ino) != (made.st_dev, made.st_ino):
            return False
        return remove_at(parent_fd, name, st)
    finally:
        os.close(parent_fd)


def remove_at(parent_fd: int, name: str, expected: os.stat_result | None = None) -> bool:
    """Delete the entry ``name`` of the folder ``parent_fd`` and all it holds (a link itself, never its target).

    With ``expected``, only when the entry still has that device and inode. True when it is
    gone; False when it, or something below it, was left (see :func:`remove_made`).
    """
    try:
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    if expected is not None and (st.st_dev, st.st_ino) != (expected.st_dev, expected.st_ino):
        return False
    if not stat.S_ISDIR(st.st_mode):
        return _unlink(parent_fd, name)
    try:
        fd = _open_folder(parent_fd, name, st)
    except OSError:
        return False
    try:
        emptied = _empty(fd, st.st_dev)
    finally:
        os.close(fd)
    if not emptied:
        return False
    try:
        os.rmdir(name, dir_fd=parent_fd)
    except FileNotFoundError:
        return True
    except PermissionError:
        with contextlib.suppress(OSError):
            os.chmod(parent_fd, 0o700)
            os.rmdir(name, dir_fd=parent_fd)
            return True
        return False
    except OSError:
        return False
    return True


def _open_folder(parent_fd: int, name: str, st: os.stat_result) -> int:
    """Open the folder ``name`` that ``st`` describes, making it readable when only its mode is in the way."""
    try:
        fd = os.open(name, _FOLDER_FLAGS, dir_fd=parent_fd)
    except PermissionError:  # a folder an agent made unreadable: it is ours, and so is its mode
        os.chmod(name, 0o700, dir_fd=parent_fd)
        fd = os.open(name, _FOLDER_FLAGS, dir_fd=parent_fd)
    opened = os.fstat(fd)
    if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino):
        os.close(fd)
        raise OSError(f"{name} changed while it was opened")
    return fd


def _unlink(fd: int, name: str) -> bool:
    try:
        os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        return True
    except PermissionError:  # a folder without write permission: it is ours
        try:
            os.chmod(fd, 0o700)
            os.unlink(name, dir_fd=fd)
        except OSError:
            return False
    except OSError:
        return False
    return True


def _names(fd: int, skip: Collection[str]) -> list[str]:
    """Up to a batch of the names in the folder ``fd``, leaving out those already given up on."""
    names: list[str] = []
    with os.scandir(fd) as entries:
        for item in entries:
            if item.name not in skip:
                names.append(item.name)
                if len(names) >= _BATCH:
                    break
    return names


class _Level:
    def __init__(self, fd: int, name: str) -> None:
        self.fd = fd
        self.name = name
        self.pending: list[str] = []
        self.left: set[str] = set()  # names that could not be removed


def _empty(top_fd: int, device: int) -> bool:
    """Remove everything in the folder ``top_fd``, iteratively, on ``device`` alone; True when it is empty."""
    stack = [_Level(top_fd, "")]
    moved = 0
    emptied = True
    while stack:
        level = stack[-1]
        if not level.pending:
            try:
                level.pending = _names(level.fd, level.left)
            except OSError:
                level.pending = []
                emptied = False
            if not level.pending:
                stack.pop()
                if not stack:
                    break
                os.close(level.fd)
                above = stack[-1]
                if level.left:
                    above.left.add(level.name)
                    continue
                try:
                    os.rmdir(level.name, dir_fd=above.fd)
                except FileNotFoundError:
                    pass
                except OSError:
                    if not _unlink_folder_retry(above.fd, level.name):
                        above.left.add(level.name)
                        emptied = False
                continue
        name = level.pending.pop()
        try:
            st = os.stat(name, dir_fd=level.fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        except OSError:
            level.left.add(name)
            emptied = False
            continue
        if not stat.S_ISDIR(st.st_mode):
            if not _unlink(level.fd, name):
                level.left.add(name)
                emptied = False
            continue
        if st.st_dev != device:  # another file system mounted here: certlab made nothing below it
            level.left.add(name)
            emptied = False
            continue
        if len(stack) >= OPEN_FOLDERS:
            # Move the folder up to the top, so that no more than OPEN_FOLDERS folders are ever held open.
            while True:
                moved += 1
                fresh = f".certlab-moved-{moved}"
                try:
                    os.stat(fresh, dir_fd=top_fd, follow_symlinks=False)
                except FileNotFoundError:
                    break
            try:
                os.rename(name, fresh, src_dir_fd=level.fd, dst_dir_fd=top_fd)
            except OSError:
                level.left.add(name)
                emptied = False
            continue
        try:
            child = _open_folder(level.fd, name, st)
        except OSError:
            level.left.add(name)
            emptied = False
            continue
        stack.append(_Level(child, name))
    return emptied and not stack


def _unlink_folder_retry(fd: int, name: str) -> bool:
    try:
        os.chmod(fd, 0o700)
        os.rmdir(name, dir_fd=fd)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def visible_test_modules(tree: Path, test_paths: Sequence[str]) -> list[str]:
    """The test modules pytest would collect below a tree's test paths (``test_*.py``, ``*_test.py``), relative.

    A tree too large to walk is one UsageError (exit 4).
    """
    found: list[str] = []
    for test_path in test_paths:
        root = tree / test_path
        if root.is_file():
            candidates = [root]
        elif root.is_dir():
            try:
                listed = [e for e in walk(root) if e.kind != "folder" and e.relpath.endswith(".py")]
            except TreeTooLarge as error:
                raise UsageError(f"{root} holds {error.message}; a task's tests must fit in a work copy") from None
            candidates = [e.path for e in sorted(listed, key=lambda e: e.relpath.split("/"))]
        else:
            candidates = []
        for file in candidates:
            if file.name.startswith("test_") or file.name.endswith("_test.py"):
                found.append(file.relative_to(tree).as_posix())
    return found
