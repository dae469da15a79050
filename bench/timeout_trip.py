"""Benchmark: the kernel modules ``--agent-timeout`` passes through to where it is enforced.

Runs ``certlab certify --family intervals --agent null --no-mutants`` in this process with a
trace on every Python call (forked workers inherit it), and an agent timeout no other figure
of the run equals. At every call that receives the timeout (or the timeout plus a grace of at
most a minute) as an argument, or inside an argument's attributes, one level deep, it keeps
the call stack. The deepest such stack is the trip from the command to where the deadline is
enforced; a forked child's stack holds its parent's frames up to the fork, so the trip
crosses processes. It prints the kernel modules of the trip in order, how many there are and
how many times the trip comes back to a module it had left. Targets (issue 24): at most 8
modules, at most 8 returns.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from types import FrameType
from typing import Any

SENTINEL = 417.25  # seconds: no other figure of a certification is within a minute above it
GRACE_S = 60.0
KERNEL = f"{os.sep}certlab_core{os.sep}"
MODULES_TARGET = 8
RETURNS_TARGET = 8


def _carries(value: Any, depth: int = 1) -> bool:
    """Whether ``value`` is the timeout (or it plus a grace), or holds it one attribute or item deep."""
    if isinstance(value, float | int) and not isinstance(value, bool):
        return SENTINEL <= value <= SENTINEL + GRACE_S
    if depth == 0 or isinstance(value, str | bytes | Path):
        return False
    if isinstance(value, dict):
        return any(_carries(v, depth - 1) for v in list(value.values())[:64])
    if isinstance(value, list | tuple):
        return any(_carries(v, depth - 1) for v in value[:64])
    fields = getattr(type(value), "__attrs_attrs__", None)
    names = [f.name for f in fields] if fields is not None else list(getattr(value, "__dict__", {}))[:64]
    return any(_carries(getattr(value, name, None), depth - 1) for name in names)


def _module(filename: str) -> str:
    """``certlab_core/certify/lab.py`` for a kernel file; "" for any other."""
    at = filename.rfind(KERNEL)
    return filename[at + 1 :] if at >= 0 else ""


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="certlab-bench-trip-") as scratch:
        log = Path(scratch) / "stacks.jsonl"

        def on_call(frame: FrameType, event: str, _arg: Any) -> None:
            if event != "call" or not _module(frame.f_code.co_filename):
                return
            code = frame.f_code
            arguments = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
            if any(_carries(frame.f_locals.get(name)) for name in arguments):
                stack = [(f.filename, f.name) for f in traceback.extract_stack(frame)]
                with log.open("a", encoding="utf-8") as out:
                    out.write(json.dumps({"pid": os.getpid(), "stack": stack}) + "\n")

        sys.setprofile(on_call)
        threading.setprofile(on_call)
        from certlab_core.cli import main as certlab

        argv = ["certify", "--family", "intervals", "--agent", "null", "--no-mutants", "--trials", "1"]
        argv += ["--agent-timeout", str(SENTINEL), "--out", str(Path(scratch) / "out")]
        try:
            code = certlab(argv)
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
        if code != 0:
            sys.exit(f"bench: certify exited {code}")
        stacks = [json.loads(line)["stack"] for line in log.read_text(encoding="utf-8").splitlines()]
    deepest = max(stacks, key=len)
    visits: list[str] = []  # kernel modules in trip order, consecutive repeats folded
    for filename, _name in deepest:
        module = _module(filename)
        if module and (not visits or visits[-1] != module):
            visits.append(module)
    returns = sum(1 for i, module in enumerate(visits) if module in visits[:i])
    print("the trip of --agent-timeout (kernel modules, in order):")
    for filename, name in deepest:
        if _module(filename):
            print(f"  {_module(filename)}  {name}")
    print(
        f"timeout trip: {len(set(visits))} kernel modules (target <= {MODULES_TARGET}), "
        f"{returns} returns to a module it had left (target <= {RETURNS_TARGET}); ends in {deepest[-1][1]}"
    )


if __name__ == "__main__":
    main()
