"""Reading files that may be hostile: regular files, capped, one clear line.

Every file certlab reads back (a manifest, a trials store, a decision, a certification bundle,
a reproducer, a descriptor) may have been made by someone who wants the reader to hang, run
out of memory or crash. The functions here are the one way those files are read:

- a file is opened with ``O_NONBLOCK`` and checked with ``fstat`` to be a regular file, so a
  FIFO (which would block forever), a device (``/dev/zero`` never ends) or a directory is
  refused before a byte is read;
- a JSON document, a YAML document or a store line is at most :data:`MAX_DOCUMENT_BYTES`
  (16 MB) and nests at most :data:`MAX_NESTING` (200) levels; a store has no total cap;
- Python's limit on the digits of an integer read from text (4,300) refuses a huge number;
- each refusal is one :class:`~certlab_core.plugin.errors.CertlabError` line naming the file,
  what is wrong and what to do, never a traceback.

An output file a user names (``--out FILE``) is written by :func:`write_output`, which a FIFO
with no reader does not block either, and which never writes into the records it was made from.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from certlab_core.plugin.errors import CertlabError, InstrumentError

MAX_DOCUMENT_BYTES = 16 << 20
MAX_NESTING = 200
# A certification bundle holds every trial's recorded changes (each trial's at most
# certlab_core.sdk.workcopy's total cap), so it alone may be larger than one document.
MAX_BUNDLE_BYTES = 256 << 20

ErrorType = type[CertlabError]

_STRING_BYTES = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_SQUARE = bytes.maketrans(b"{}", b"[]")


def _kind_of(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def open_regular(path: Path, what: str, error: ErrorType = InstrumentError, missing: str | None = None) -> int:
    """A read-only descriptor of ``path`` once it is proven a regular file (symlinks to one are followed).

    The open never blocks (``O_NONBLOCK``: a FIFO with no writer opens at once) and the check is
    on the opened file, so nothing can be swapped in between. ``missing`` is the message for an
    absent file (by default: no ``what`` there).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise error(missing or f"{path}: no {what} there") from None
    except OSError as failure:
        raise error(f"{path}: cannot open the {what} ({failure.strerror})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise error(f"{path}: {_kind_of(mode)}, not a regular file; give the {what} as a file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def opened_regular(
    path: Path, what: str, error: ErrorType = InstrumentError, missing: str | None = None
) -> Iterator[IO[bytes]]:
    """:func:`open_regular` as a binary file object, closed on exit."""
    handle = os.fdopen(open_regular(path, what, error, missing), "rb")
    with handle:
        yield handle


def read_capped_bytes(
    path: Path,
    what: str,
    error: ErrorType = InstrumentError,
    missing: str | None = None,
    cap: int = MAX_DOCUMENT_BYTES,
) -> bytes:
    """The bytes of a regular file of at most ``cap`` bytes (a file that grows past it while read is refused too)."""
    with opened_regular(path, what, error, missing) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > cap:
            raise error(_too_large(path, what, size, cap))
        try:
            data = handle.read(cap + 1)
        except OSError as failure:
            raise error(f"{path}: cannot read the {what} ({failure.strerror})") from None
    if len(data) > cap:
        raise error(_too_large(path, what, len(data), cap))
    return data


def _too_large(path: Path, what: str, size: int, cap: int) -> str:
    return f"{path}: {size} bytes, more than the {cap >> 20} MB a {what} may hold; it is not one certlab wrote"


def read_capped_text(
    path: Path,
    what: str,
    error: ErrorType = InstrumentError,
    missing: str | None = None,
    cap: int = MAX_DOCUMENT_BYTES,
) -> str:
    """The UTF-8 text of a regular file of at most ``cap`` bytes."""
    data = read_capped_bytes(path, what, error, missing, cap)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as failure:
        raise error(f"{path}: not UTF-8 text (byte {failure.start}); the {what} is damaged") from None


def nesting_depth(data: bytes | str) -> int:
    """How deep the arrays and objects of a JSON or YAML flow text nest (brackets inside strings are not counted).

    For text about to be parsed by something that recurses (the YAML reader); a JSON text is
    parsed first and its document walked instead (:func:`parse_json`), which is faster.

    Cheap for what certlab writes: a text with at most :data:`MAX_NESTING` brackets cannot nest
    deeper, so its bracket count is returned as the bound. Otherwise the strings are cut out,
    only the brackets kept, and the innermost pairs removed in passes, each a C-speed replace:
    the number of passes is the depth (counted up to one past the cap). Text that is not
    JSON may get any answer here; the parser refuses it next.
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    brackets_seen = raw.count(b"[") + raw.count(b"{")
    if brackets_seen <= MAX_NESTING:
        return brackets_seen
    brackets = _STRING_BYTES.sub(b"", raw).translate(_SQUARE, _NOT_BRACKETS)
    depth = 0
    while brackets and depth <= MAX_NESTING:
        shorter = brackets.replace(b"[]", b"")
        if len(shorter) == len(brackets):
            break  # unbalanced: not JSON
        brackets, depth = shorter, depth + 1
    return depth


def parse_json(
    data: bytes | str,
    where: str,
    error: ErrorType = InstrumentError,
    what: str = "document",
    cap: int = MAX_DOCUMENT_BYTES,
) -> Any:
    """A JSON text parsed under the caps: at most 16 MB, 200 levels, integers of at most 4,300 digits.

    NaN and Infinity parse (a seal check then fails on them: they have no canonical form).

    ``where`` names the file (and line) in the one-line refusal.
    """
    if len(data) > cap:
        raise error(f"{where}: more than {cap >> 20} MB; the {what} is not one certlab wrote")
    try:
        document = json.loads(data)
    except RecursionError:
        raise error(f"{where}: nested too deep to read; the {what} is not one certlab wrote") from None
    except UnicodeDecodeError as failure:
        raise error(f"{where}: not UTF-8 text (byte {failure.start}); the {what} is damaged") from None
    except ValueError as failure:  # JSONDecodeError, and an integer of more digits than Python reads
        detail = str(failure).splitlines()[0][:120]
        raise error(f"{where}: not JSON ({detail}); the {what} is damaged") from None
    if _too_deep(data, document):
        raise error(f"{where}: nested more than {MAX_NESTING} levels deep; the {what} is not one certlab wrote")
    return document


def _too_deep(data: bytes | str, document: Any) -> bool:
    """Whether a parsed document nests past :data:`MAX_NESTING` (walked only when its text has that many brackets)."""
    brackets = data.count(b"[") + data.count(b"{") if isinstance(data, bytes) else data.count("[") + data.count("{")
    if brackets <= MAX_NESTING:
        return False
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_NESTING:
            return True
        children = node.values() if type(node) is dict else node if type(node) is list else ()
        stack.extend((child, depth + 1) for child in children if type(child) in (dict, list))
    return False


def load_json(
    path: Path,
    what: str,
    error: ErrorType = InstrumentError,
    missing: str | None = None,
    cap: int = MAX_DOCUMENT_BYTES,
) -> Any:
    """A JSON document read from a regular file under every cap of this module, or one clear line."""
    return parse_json(read_capped_bytes(path, what, error, missing, cap), str(path), error, what, cap)


def parse_line(raw: bytes | str) -> Any | None:
    """One store line parsed under the caps, or None when it is not such JSON (the caller reports the line)."""
    if len(raw) > MAX_DOCUMENT_BYTES:
        return None
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    return None if _too_deep(raw, document) else document


def iter_capped_lines(
    path: Path, what: str, error: ErrorType = InstrumentError, missing: str | None = None
) -> Iterator[bytes]:
    """The lines of a regular file as bytes, without their newline, each at most 16 MB (no cap on their number)."""
    with opened_regular(path, what, error, missing) as handle:
        number = 0
        while True:
            try:
                raw = handle.readline(MAX_DOCUMENT_BYTES + 2)
            except OSError as failure:
                raise error(f"{path}: cannot read the {what} ({failure.strerror})") from None
            if not raw:
                return
            number += 1
            if raw.endswith(b"\n"):
                raw = raw[:-1]
            if len(raw) > MAX_DOCUMENT_BYTES:
                raise error(line_too_long(path, number))
            yield raw


def refuse_output_inside(path: Path, records: Path, what: str = "--out") -> None:
    """Refuse the output file ``path`` when it is in ``records``, the folder of records the command reads.

    A report or reproducer written over ``decision.json``, ``manifest.json`` or ``trials.jsonl``
    would destroy the run it was made from. Links are followed, so one into the folder is in it
    (``os.path.realpath``: a link loop is left to the write, which names it in one line).
    """
    from certlab_core.plugin.errors import UsageError

    if Path(os.path.realpath(path)).is_relative_to(os.path.realpath(records)):
        raise UsageError(f"{what} {path}: inside {records}, whose records this command reads; write it elsewhere")


def write_output(path: Path, text: str, what: str = "--out", records: Path | None = None) -> None:
    """Write ``text`` to the file ``path`` a user named as ``what`` (``--out``), making its folders.

    Anything in the way (a folder, a FIFO with no reader, a read-only place) is one
    UsageError line saying so; a FIFO is opened without blocking, so nothing waits for a reader.
    With ``records``, the folder of records the command read, a path in it is refused too
    (:func:`refuse_output_inside`).
    """
    from certlab_core.plugin.errors import UsageError

    if records is not None:
        refuse_output_inside(path, records, what)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
        os.set_blocking(fd, True)  # a pipe with a reader takes the whole text, however long
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as error:
        reason = "a FIFO that nothing reads" if error.errno == errno.ENXIO else error.strerror
        raise UsageError(f"{what} {path}: cannot write ({reason}); choose a writable file") from None


def replace_file(path: Path, data: bytes, what: str, error: ErrorType = InstrumentError) -> None:
    """Make ``path`` a new file holding ``data``, in a folder a user or another run may have laid out.

    The bytes go to a fresh file of a random name beside ``path`` (made with ``O_EXCL``, so no
    link planted there is followed), which then replaces ``path``: a link at ``path`` is replaced,
    never written through, and a reader sees the old file or the new one, never half of one. A
    folder that is itself a link is refused, as certlab writes only into real folders.
    """
    import tempfile

    folder = path.parent
    if folder.is_symlink():
        raise error(f"{path}: its folder {folder} is a link; certlab writes the {what} only into a real folder")
    temporary = None
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except OSError as failure:
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        raise error(f"{path}: cannot write the {what} ({failure.strerror})") from None


def line_too_long(path: Path, number: int) -> str:
    return (
        f"{path} line {number}: longer than {MAX_DOCUMENT_BYTES >> 20} MB, which no certlab record is; "
        "the store is damaged"
    )


CERTIFICATION_SCHEMA = "certlab.certification/1"
"""The schema of the bundle ``certlab certify`` writes (``bundle.json``)."""


def load_certification(path: Path) -> dict[str, Any]:
    """A certification bundle read as hostile input, its schema and seal checked: anything wrong is one line, exit 3.

    The one reader of a bundle for ``certlab regrade`` and for plugins (``certlab predict --against``).
    """
    from certlab_core.sdk.canonical import seal_holds

    missing = f"{path}: no certification bundle there; give the folder certlab certify wrote"
    bundle = load_json(path, "certification bundle", InstrumentError, missing, MAX_BUNDLE_BYTES)
    if not isinstance(bundle, dict):
        raise InstrumentError(f"{path}: not a certification bundle (the top level is not an object)")
    if bundle.get("schema") != CERTIFICATION_SCHEMA:
        raise InstrumentError(f"{path}: schema is {bundle.get('schema')!r}, expected {CERTIFICATION_SCHEMA!r}")
    if "seal" not in bundle:
        raise InstrumentError(
            f"{path}: the bundle is unsealed; only a bundle written by certlab certify can be regraded"
        )
    if not seal_holds(bundle):
        raise InstrumentError(
            f"{path}: the seal does not match the contents; the bundle was edited after it was sealed"
        )
    return bundle
