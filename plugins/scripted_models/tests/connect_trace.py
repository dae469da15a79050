"""Which connections a real CLI attempted during a certification: ``strace -ff`` of the whole run, sandbox included.

``certlab certify`` runs under ``strace -ff -e trace=connect,execve,clone,...`` (one file per
process, PIDs inside the sandbox's PID namespace translated to ours). The CLI's process tree is
each process that executed the CLI's executable, from that exec on, and every process and
thread it started; its ``connect`` calls are what the CLI attempted. The model boundary is a
port that certlab's own processes listen on (their ``getsockname``), on 127.0.0.1; inside the
sandbox the same port is the relay to it. Proxy variables would prove nothing (Node's fetch
ignores them); a ``connect`` the kernel saw cannot be missed.

A connect to glibc's name-service cache (``/var/run/nscd/socket``) that fails is not counted:
no nscd runs, so the lookup (a user name, for ``ps`` or a login shell) reads the files, and a host
lookup would go on to DNS, whose connect to port 53 is counted.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from attrs import frozen

SYSCALLS = "connect,execve,clone,clone3,fork,vfork,getsockname"
_CALL = re.compile(r"^(\w+)\((.*)\)\s+=\s+(-?\d+)(?: /\* (\d+) in strace's PID NS \*/)?")
_INET = re.compile(r'sa_family=AF_INET, sin_port=htons\((\d+)\), sin_addr=inet_addr\("([\d.]+)"\)')
_FAILED_NSCD = re.compile(r'sun_path="/var/run/nscd/socket"\}, \d+\) = -1 E')
_FORKS = ("clone", "clone3", "fork", "vfork")


def strace_or_skip() -> str:
    """``strace``; without it the test skips (one line), or fails when CI is set (the Makefile installs it)."""
    found = shutil.which("strace")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("CI is set and strace is not installed (make unit installs it from Debian)")
        pytest.skip("strace is not installed, so the CLI's connections are not watched (apt-get install strace)")
    return found


def traced(argv: Sequence[str], folder: Path) -> list[str]:
    """``argv`` run under ``strace -ff``, one file per process in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    return [
        strace_or_skip(),
        "-ff",
        "-qq",
        "--seccomp-bpf",
        "--pidns-translation",
        "-e",
        f"trace={SYSCALLS}",
        "-s",
        "256",
        "-o",
        str(folder / "pid"),
        *argv,
    ]


def _calls(lines: Sequence[str]) -> Iterator[tuple[int, str, str, int, str]]:
    for index, line in enumerate(lines):
        match = _CALL.match(line)
        if match:
            name, args, value, translated = match.groups()
            yield index, name, args, int(translated or value), line


@frozen
class Connections:
    """The connects of the CLI's process tree, and the ports certlab's own processes listen on."""

    by_cli: tuple[str, ...]
    harness_ports: frozenset[int]
    cli_processes: int

    def elsewhere(self, upstream_port: int) -> list[str]:
        """Every connect the CLI attempted but to the model boundary (a harness port on 127.0.0.1, not the upstream)."""
        out = []
        for line in self.by_cli:
            inet = _INET.search(line)
            if inet and inet.group(2) == "127.0.0.1" and int(inet.group(1)) in self.harness_ports - {upstream_port}:
                continue
            if _FAILED_NSCD.search(line):
                continue
            out.append(line)
        return out

    def to_boundary(self, upstream_port: int) -> list[str]:
        return [line for line in self.by_cli if line not in self.elsewhere(upstream_port) and _INET.search(line)]


def connections(folder: Path, executable: str) -> Connections:
    """What the trace in ``folder`` shows of the processes that ran ``executable``, and of certlab's own."""
    processes = {
        int(path.suffix[1:]): path.read_text(encoding="utf-8", errors="replace").splitlines()
        for path in folder.glob("pid.*")
    }
    prefix = f'"{executable}"'
    starts: dict[int, int] = {}
    todo = [
        (pid, index)
        for pid, lines in processes.items()
        for index, name, args, value, _line in _calls(lines)
        if name == "execve" and value == 0 and args.startswith(prefix)
    ]
    while todo:
        pid, start = todo.pop()
        if pid in starts and starts[pid] <= start:
            continue
        starts[pid] = start
        for index, name, _args, value, _line in _calls(processes.get(pid, [])):
            if index > start and name in _FORKS and value > 0:
                todo.append((value, -1))
    by_cli = [
        line
        for pid, start in starts.items()
        for index, name, _args, _value, line in _calls(processes.get(pid, []))
        if index > start and name == "connect"
    ]
    ports = {
        int(inet.group(1))
        for pid, lines in processes.items()
        if pid not in starts
        for _index, name, args, value, _line in _calls(lines)
        if name == "getsockname" and value == 0
        for inet in [_INET.search(args)]
        if inet is not None and inet.group(2) == "127.0.0.1"
    }
    return Connections(by_cli=tuple(by_cli), harness_ports=frozenset(ports), cli_processes=len(starts))
