"""The case host: forks a process per held-out call and never sees an answer.

The acceptance grader starts this file as ``python -I -S case_host.py TREE TIMEOUT SITE_DIRS...``,
with a cleaned environment, so it holds nothing of the lab: no expected value, no case
label, no grader state. It reads one call at a time from stdin (a 4-byte length, then
``marshal`` data ``{"call", "args", "kwargs"}`` from the grader), forks a fresh process for
it, and writes one JSON line back: what the code returned (as JSON data) or the class name
of what it raised, and every process the call left running, named and killed.

It makes itself a child subreaper, so a process the call leaves behind, even one that
started its own session and double-forked, is re-parented here and found. It imports only
the standard library modules it needs, so the code under test is imported fresh in each
case process and never in the host.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import marshal
import os
import select
import signal
import sys
import time
from typing import Any

PR_SET_CHILD_SUBREAPER = 36
# Standard-library modules most code under test imports; loaded once here so that each case
# process starts warm. Only the standard library: the code under test is never imported here.
WARM_MODULES = (
    "collections",
    "collections.abc",
    "dataclasses",
    "datetime",
    "enum",
    "functools",
    "itertools",
    "math",
    "operator",
    "re",
    "typing",
)
MAX_REPLY_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 64
REPR_CHARS = 200


class Unrepresentable(Exception):
    """The value is not JSON data (a set, an object, a dict with non-string keys, ...)."""


# ----------------------------------------------------------------------------- JSON, written by hand
# The host avoids importing ``json`` (it drags in ``re`` and ``enum``: tens of milliseconds per
# grading) and must not call any method the code under test could have overridden: only exact
# base-class behaviour is used to read a value.


def _string(text: str) -> str:
    out = ['"']
    for char in text:
        code = ord(char)
        if char == '"':
            out.append('\\"')
        elif char == "\\":
            out.append("\\\\")
        elif 0x20 <= code < 0x7F:
            out.append(char)
        elif code > 0xFFFF:
            code -= 0x10000
            out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
        else:
            out.append(f"\\u{code:04x}")
    out.append('"')
    return "".join(out)


def _float(number: float) -> str:
    if number != number:
        return "NaN"
    if number in (float("inf"), float("-inf")):
        return "Infinity" if number > 0 else "-Infinity"
    return float.__repr__(number)


def encode(value: Any, depth: int = 0) -> str:
    """``value`` as JSON text; tuples become lists; anything else raises Unrepresentable."""
    if depth > MAX_DEPTH:
        raise Unrepresentable(f"nested deeper than {MAX_DEPTH} levels")
    kind = type(value)
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return int.__repr__(int.__int__(value))
        except ValueError as error:  # more digits than str() allows
            raise Unrepresentable(str(error)) from None
    if isinstance(value, float):
        return _float(float.__float__(value))
    if isinstance(value, str):
        return _string(str.__str__(value))
    if isinstance(value, list):
        return "[" + ",".join(encode(item, depth + 1) for item in list.__iter__(value)) + "]"
    if isinstance(value, tuple):
        return "[" + ",".join(encode(item, depth + 1) for item in tuple.__iter__(value)) + "]"
    if isinstance(value, dict):
        parts = []
        for key, item in dict.items(value):
            if not isinstance(key, str):
                raise Unrepresentable(f"a dict key is a {type(key).__name__}, not a string")
            parts.append(_string(str.__str__(key)) + ":" + encode(item, depth + 1))
        return "{" + ",".join(parts) + "}"
    raise Unrepresentable(f"a {kind.__name__}")


def _short_repr(value: Any) -> str:
    try:
        text = repr(value)
    except BaseException as error:
        text = f"<repr raised {type(error).__name__}>"
    return text if len(text) <= REPR_CHARS else text[:REPR_CHARS] + "..."


# ----------------------------------------------------------------------------- one case, in its own process


def _inside(path: str, tree: str) -> bool:
    return os.path.realpath(path).startswith(os.path.realpath(tree) + os.sep)


def evaluate(request: dict[str, Any], tree: str) -> str:
    """In the case process: import the module from the copy, make the call, describe what came back."""
    module_name, function_path = str(request["call"]).split(":", 1)
    try:
        module = importlib.import_module(module_name)
    except BaseException as error:
        return '{"kind":"import-failed","name":' + _string(type(error).__name__) + "}"
    origin = getattr(module, "__file__", None)
    if not isinstance(origin, str) or not _inside(origin, tree):
        return '{"kind":"stray","detail":' + _string(f"{module_name} was loaded from {origin}, not from the copy") + "}"
    target: Any = module
    try:
        for part in function_path.split("."):
            target = getattr(target, part)
    except BaseException:
        return '{"kind":"missing","detail":' + _string(f"{module_name} has no {function_path}") + "}"
    try:
        value = target(*request["args"], **request["kwargs"])
    except BaseException as error:
        return '{"kind":"raised","name":' + _string(type(error).__name__) + "}"
    try:
        text = encode(value)
    except Unrepresentable as why:
        return (
            '{"kind":"unrepresentable","type":'
            + _string(type(value).__name__)
            + ',"why":'
            + _string(str(why))
            + ',"repr":'
            + _string(_short_repr(value))
            + "}"
        )
    except BaseException as error:
        return (
            '{"kind":"unrepresentable","type":'
            + _string(type(value).__name__)
            + ',"why":'
            + _string(f"reading it raised {type(error).__name__}")
            + ',"repr":"?"}'
        )
    if len(text) > MAX_REPLY_BYTES:
        return '{"kind":"unrepresentable","type":' + _string(type(value).__name__) + ',"why":"too large","repr":"?"}'
    return '{"kind":"returned","value":' + text + "}"


def case_process(request: dict[str, Any], tree: str, result_fd: int, log_fd: int) -> None:
    """The forked case process: its own session, stdin from /dev/null, output to the log; never returns."""
    code = 0
    try:
        os.setsid()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(devnull)
        reply = evaluate(request, tree).encode("utf-8")
        view = memoryview(reply)
        while view:
            view = view[os.write(result_fd, view) :]
    except BaseException:
        code = 70
    finally:
        os._exit(code)


# ----------------------------------------------------------------------------- the host


def _process_table() -> dict[int, tuple[int, str]]:
    """{pid: (parent pid, state)} of every process visible in /proc."""
    table: dict[int, tuple[int, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
            table[int(entry)] = (int(fields[1]), fields[0].decode())
        except (OSError, IndexError, ValueError):
            continue
    return table


def _command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            text = handle.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    return text[:REPR_CHARS] or "?"


def _reap() -> None:
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _has_children() -> bool:
    """Whether this host has any child left (zombies are reaped first).

    A subreaper with no child has no descendant at all: an orphan is re-parented to the
    host before its dead parent can be reaped, so this check is exact and spares the scan.
    """
    _reap()
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return False
    return True


def kill_leftovers() -> list[str]:
    """Every live descendant of this host (the calls' leftovers), named, then killed and reaped."""
    if not _has_children():
        return []
    me = os.getpid()
    named: dict[int, str] = {}  # by pid: one that outlives a round is named once
    for _round in range(20):
        _reap()
        table = _process_table()
        children: dict[int, list[int]] = {}
        for pid, (parent, _state) in table.items():
            children.setdefault(parent, []).append(pid)
        found: list[int] = []
        stack = list(children.get(me, []))
        while stack:
            pid = stack.pop()
            found.append(pid)
            stack.extend(children.get(pid, []))
        alive = [pid for pid in found if table[pid][1] not in ("Z", "X")]
        if not alive:
            _reap()
            return list(named.values())
        for pid in alive:
            named.setdefault(pid, f"pid {pid}: {_command_line(pid)}")
        for pid in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)
    return list(named.values())


def run_one(request: dict[str, Any], tree: str, timeout_s: float, log_fd: int) -> str:
    """Fork the case process, wait for its answer or its time limit, then clear what it left."""
    read_fd, write_fd = os.pipe()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        case_process(request, tree, write_fd, log_fd)
    os.close(write_fd)
    chunks: list[bytes] = []
    total = 0
    timed_out = False
    deadline = started + timeout_s
    while True:
        wait = deadline - time.monotonic()
        if wait <= 0 or not select.select([read_fd], [], [], wait)[0]:
            timed_out = True
            break
        chunk = os.read(read_fd, 1 << 16)
        if not chunk:
            break
        total += len(chunk)
        if total > MAX_REPLY_BYTES + 4096:
            break
        chunks.append(chunk)
    os.close(read_fd)
    if timed_out:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    wall = time.monotonic() - started
    data = b"".join(chunks)
    if timed_out:
        reply = '{"kind":"timeout"}'
    elif not data or total > MAX_REPLY_BYTES + 4096:
        if os.WIFSIGNALED(status):
            how = f"was killed by signal {os.WTERMSIG(status)}"
        else:
            how = f"exited with status {os.waitstatus_to_exitcode(status)}"
        reply = '{"kind":"died","detail":' + _string(f"the case process {how} before answering") + "}"
    else:
        reply = data.decode("utf-8", "replace")
    leftovers = kill_leftovers()
    # The case's own answer travels as an escaped string: nothing it wrote can forge the envelope.
    return (
        '{"reply_text":'
        + _string(reply)
        + ',"leftovers":['
        + ",".join(_string(item) for item in leftovers)
        + '],"wall_s":'
        + _float(round(wall, 4))
        + "}"
    )


def _read_exactly(fd: int, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def main(argv: list[str]) -> int:
    tree, timeout_text, *site_dirs = argv[1:]
    timeout_s = float(timeout_text)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        os.write(2, b"case host: could not become a child subreaper\n")
        return 71
    for name in WARM_MODULES:
        importlib.import_module(name)
    os.chdir(tree)
    # The copy is scratch, deleted after the last case: the first case process may cache the
    # bytecode of the code under test there, so later ones do not compile it again.
    sys.dont_write_bytecode = False
    sys.path[:0] = [tree]
    sys.path.extend(site_dirs)
    log_fd = os.open(os.path.join(os.path.dirname(tree), "cases.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    while True:
        header = _read_exactly(0, 4)
        if header is None:
            break
        body = _read_exactly(0, int.from_bytes(header, "big"))
        if body is None:
            break
        request = marshal.loads(body)
        line = run_one(request, tree, timeout_s, log_fd) + "\n"
        view = memoryview(line.encode("utf-8"))
        while view:
            view = view[os.write(1, view) :]
        del request, body
    return 0


if __name__ == "__main__":
    # No interpreter shutdown: nothing here needs finalising, and it costs tens of milliseconds.
    code = main(sys.argv)
    sys.stdout.flush()
    os._exit(code)
