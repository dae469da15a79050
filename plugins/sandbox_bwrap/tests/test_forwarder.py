"""The relays between a sandbox and the host's loopback: one thread whatever the connections, and a cap on them.

3,000 connections to the relay socket once made 6,843 harness threads (two per connection,
which the sandbox's process limit does not count). Both relays now run one selector loop:
the host side (``HostPortForwarder``, in the harness) and the inner one (``inner_relay.py``,
in the sandbox). Each test uses real sockets on 127.0.0.1 and a real echo server in another
process, so that the threads counted are the relay's alone.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from certlab_sandbox_bwrap import inner_relay
from certlab_sandbox_bwrap.forwarder import HostPortForwarder

ECHO_SERVER = r"""
import socket, sys, threading
family = socket.AF_UNIX if sys.argv[1] == "unix" else socket.AF_INET
server = socket.socket(family, socket.SOCK_STREAM)
server.bind(sys.argv[2] if family == socket.AF_UNIX else ("127.0.0.1", 0))
server.listen(256)
print(sys.argv[2] if family == socket.AF_UNIX else server.getsockname()[1], flush=True)
def echo(connection):
    with connection:
        while data := connection.recv(65536):
            connection.sendall(data)
while True:
    connection, _ = server.accept()
    threading.Thread(target=echo, args=(connection,), daemon=True).start()
"""


@pytest.fixture()
def tcp_echo() -> Iterator[int]:
    """A port on 127.0.0.1 where another process echoes every connection."""
    process = subprocess.Popen([sys.executable, "-c", ECHO_SERVER, "tcp", ""], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        yield int(process.stdout.readline())
    finally:
        process.kill()
        process.wait()


@pytest.fixture()
def unix_echo(tmp_path: Path) -> Iterator[str]:
    """A Unix socket where another process echoes every connection."""
    path = str(tmp_path / "echo.sock")
    process = subprocess.Popen([sys.executable, "-c", ECHO_SERVER, "unix", path], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == path
        yield path
    finally:
        process.kill()
        process.wait()


def echoes(client: socket.socket, message: bytes) -> bool:
    """Whether ``message`` comes back whole through ``client`` (False: the connection was closed instead)."""
    client.settimeout(5)
    received = b""
    try:
        client.sendall(message)
        while len(received) < len(message):
            data = client.recv(65536)
            if not data:
                return False
            received += data
    except (BrokenPipeError, ConnectionResetError):
        return False
    return received == message


def closed_by_peer(client: socket.socket) -> bool:
    """Whether the other end closed ``client`` without a byte (the relay refused it)."""
    client.settimeout(5)
    try:
        client.sendall(b"hello?")
        return client.recv(100) == b""
    except OSError:  # reset, or a broken pipe: closed all the same
        return True


def unix_client(path: str) -> socket.socket:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(path)
    return client


def test_many_relayed_connections_make_one_forwarder_thread(tcp_echo: int) -> None:
    before = threading.active_count()
    forwarder = HostPortForwarder((tcp_echo,))
    clients = [unix_client(forwarder.sockets[tcp_echo]) for _ in range(24)]
    try:
        for index, client in enumerate(clients):
            assert echoes(client, f"ping {index}".encode())
        assert threading.active_count() == before + 1, "a thread per connection (or two) is back"
    finally:
        for client in clients:
            client.close()
        forwarder.close()
    assert threading.active_count() == before


def test_past_its_cap_the_forwarder_closes_a_connection_and_keeps_relaying_the_others(tcp_echo: int) -> None:
    before = threading.active_count()
    forwarder = HostPortForwarder((tcp_echo,), max_connections=4)
    path = forwarder.sockets[tcp_echo]
    kept = [unix_client(path) for _ in range(4)]
    extra: list[socket.socket] = []
    try:
        for index, client in enumerate(kept):  # within the cap: relayed both ways
            assert echoes(client, f"ping {index}".encode())
        extra = [unix_client(path) for _ in range(60)]
        assert all(closed_by_peer(client) for client in extra)
        assert forwarder.refused == 60
        assert threading.active_count() == before + 1  # one thread, not two per connection
        for index, client in enumerate(kept):  # the refusals took nothing from the connections relayed
            assert echoes(client, b"x" * 100_000 + str(index).encode())
        kept.pop().close()  # a slot freed is taken again
        deadline = time.monotonic() + 5
        while True:
            again = unix_client(path)
            if echoes(again, b"again") or time.monotonic() > deadline:
                break
            again.close()
        assert echoes(again, b"still")
        kept.append(again)
    finally:
        for client in kept + extra:
            client.close()
        forwarder.close()
    assert threading.active_count() == before
    assert not forwarder.folder.exists()


def test_a_relayed_connection_half_closes_as_its_peers_do(tcp_echo: int) -> None:
    forwarder = HostPortForwarder((tcp_echo,))
    try:
        client = unix_client(forwarder.sockets[tcp_echo])
        client.settimeout(5)
        client.sendall(b"last words")
        client.shutdown(socket.SHUT_WR)  # the echo server sees the end, answers, and closes
        received = b""
        while data := client.recv(100):
            received += data
        assert received == b"last words"
        client.close()
    finally:
        forwarder.close()


def _threads_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError(f"no thread count for {pid}")


def _relay_process(program_pid: int) -> int:
    """The inner relay's process: the one child the relayed program has (it forked it before becoming it)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        children = Path(f"/proc/{program_pid}/task/{program_pid}/children").read_text().split()
        if children:
            return int(children[0])
        time.sleep(0.02)
    raise AssertionError("the inner relay forked no relay process")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_inner_relay_is_one_thread_whatever_the_connections_and_closes_those_past_its_cap(unix_echo: str) -> None:
    port = _free_port()
    program = subprocess.Popen(
        [
            sys.executable,
            inner_relay.__file__,
            f"{port}={unix_echo}",
            "--",
            "sleep",
            "60",
        ]
    )
    clients: list[socket.socket] = []
    relay_pid = 0
    try:
        relay_pid = relay = _relay_process(program.pid)
        deadline = time.monotonic() + 10
        while True:  # the ports are bound before the fork: connecting works as soon as the relay runs
            try:
                first = socket.create_connection(("127.0.0.1", port), timeout=5)
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.02)
        cap = inner_relay.MAX_CONNECTIONS
        clients = [first, *(socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(cap - 1))]
        for index, client in enumerate(clients):
            assert echoes(client, f"inside {index}".encode())
        assert _threads_of(relay) == 1, "a thread per connection (or two) is back"
        refused = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(40)]
        clients += refused
        assert all(closed_by_peer(client) for client in refused)
        assert _threads_of(relay) == 1
        assert echoes(clients[0], b"still relayed")
    finally:
        for client in clients:
            client.close()
        if relay_pid:
            os.kill(relay_pid, signal.SIGKILL)  # the program's child, not ours: in a sandbox it dies with it
        program.kill()
        program.wait()


LONG_TEMP_RELAY = """
import sys
from certlab_core.sdk.containment import runtime_folder
from certlab_sandbox_bwrap.forwarder import HostPortForwarder

runtime = runtime_folder()
forwarder = HostPortForwarder((8765,), parent=str(runtime))
print(runtime, flush=True)
forwarder.close()
"""


def test_the_host_relay_binds_its_socket_though_the_temp_folder_is_a_long_path(tmp_path: Path) -> None:
    # With a 65-byte TMPDIR (a CI workspace's) and no XDG_RUNTIME_DIR, every relay socket certlab bound below its
    # runtime folder was past AF_UNIX's 108 bytes: OSError "AF_UNIX path too long", and each trial through a
    # model relay broke. The runtime folder is then made where a socket fits.
    long_temp = tmp_path / ("t" * max(1, 65 - len(str(tmp_path)) - 1))
    long_temp.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"} | {"TMPDIR": str(long_temp)}
    done = subprocess.run([sys.executable, "-c", LONG_TEMP_RELAY], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    runtime = Path(done.stdout.strip())
    assert runtime.name.startswith("certlab-runtime-") and not runtime.exists()  # removed by its maker at exit
    assert list(long_temp.iterdir()) == []
