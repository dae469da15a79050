"""In the sandbox: relay 127.0.0.1:PORT to each SOCKET, then exec the program.

The sandbox's network namespace is new and empty, so an agent whose client wants an
``http://127.0.0.1:PORT`` base URL (the model boundary) reaches it through this relay: it
binds every port first, forks one process that relays each connection to the host Unix
socket bound into the sandbox at its path, and becomes the program. It imports only the
standard library (it runs with the agent environment's Python, where certlab is absent),
and dies with the sandbox's PID namespace.

    python inner_relay.py [--max-connections=N] 8765=/path/to/model.sock -- PROGRAM ARG...

:class:`Relay` is the one relaying engine, used here and by the host side
(``certlab_sandbox_bwrap.forwarder``): one thread and one selector for every listener and
every connection, at most ``max_connections`` (default :data:`MAX_CONNECTIONS`) relayed at
once; a connection past that is closed as soon as it is accepted. Each direction buffers at
most :data:`BUFFER_BYTES`, and stops reading while its buffer is full, so a relay holds at
most ``2 * BUFFER_BYTES`` per connection, whatever the peers send. (A thread per connection,
as before, let 3,000 connections make 6,843 threads in the harness: a process limit does not
count threads.)
"""

from __future__ import annotations

import contextlib
import errno
import os
import selectors
import socket
import sys
from typing import Any

#: Connections one relay carries at once; one more is closed as it is accepted.
MAX_CONNECTIONS = 32
#: What one direction of one connection holds before the relay stops reading from its source.
BUFFER_BYTES = 1 << 16
_ACCEPTS_PER_WAKE = 64
_IN_PROGRESS = (errno.EINPROGRESS, errno.EALREADY, errno.EWOULDBLOCK)


class _Pair:
    """One relayed connection: the accepted socket and its upstream, with what each direction holds."""

    def __init__(self, client: socket.socket, upstream: socket.socket, connecting: bool) -> None:
        self.client = client
        self.upstream = upstream
        self.connecting = connecting
        self.to_upstream = bytearray()  # read from the client, not yet written upstream
        self.to_client = bytearray()
        self.client_eof = False  # the client will send nothing more
        self.upstream_eof = False
        self.upstream_shut = False  # its writing side was shut once the client's bytes were all sent
        self.client_shut = False
        self.masks: dict[socket.socket, int] = {client: 0, upstream: 0}

    def wanted(self, sock: socket.socket) -> int:
        """The events ``sock`` waits for now."""
        if sock is self.upstream:
            if self.connecting:
                return selectors.EVENT_WRITE
            reading = not self.upstream_eof and len(self.to_client) < BUFFER_BYTES
            return (selectors.EVENT_READ if reading else 0) | (selectors.EVENT_WRITE if self.to_upstream else 0)
        reading = not self.connecting and not self.client_eof and len(self.to_upstream) < BUFFER_BYTES
        return (selectors.EVENT_READ if reading else 0) | (selectors.EVENT_WRITE if self.to_client else 0)

    @property
    def done(self) -> bool:
        return self.upstream_shut and self.client_shut


class Relay:
    """Every connection of every listener, relayed to its upstream address by one selector loop.

    ``listen`` adds a listener and where its connections go; ``run`` relays until ``stop``
    (callable from any thread), then closes every socket it holds, listeners included.
    ``refused`` counts the connections closed because ``max_connections`` were relayed.
    """

    def __init__(self, max_connections: int = MAX_CONNECTIONS) -> None:
        if max_connections < 1:
            raise ValueError("a relay carries at least one connection")
        self.max_connections = max_connections
        self.refused = 0
        self.pairs: set[_Pair] = set()
        self._selector = selectors.DefaultSelector()
        self._listeners: list[socket.socket] = []
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        self._wake_write.setblocking(False)
        self._selector.register(self._wake_read, selectors.EVENT_READ, None)
        self._stopping = False

    def listen(self, listener: socket.socket, family: int, address: Any) -> None:
        """Relay every connection accepted on ``listener`` to ``address`` (a Unix path or a (host, port))."""
        listener.setblocking(False)
        self._listeners.append(listener)
        self._selector.register(listener, selectors.EVENT_READ, (family, address))

    def stop(self) -> None:
        """End ``run`` (from any thread); it closes everything before it returns."""
        self._stopping = True
        with contextlib.suppress(OSError):
            self._wake_write.send(b"x")

    def run(self) -> None:
        try:
            while not self._stopping:
                for key, mask in self._selector.select():
                    if key.data is None:
                        with contextlib.suppress(OSError):
                            self._wake_read.recv(64)
                    elif isinstance(key.data, _Pair):
                        self._serve(key.data, key.fileobj, mask)  # type: ignore[arg-type]
                    else:
                        self._accept(key.fileobj, *key.data)  # type: ignore[arg-type]
        finally:
            self._close_everything()

    # ------------------------------------------------------------------ connections

    def _accept(self, listener: socket.socket, family: int, address: Any) -> None:
        for _ in range(_ACCEPTS_PER_WAKE):
            try:
                client, _peer = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # a listener that failed (closed under us, out of descriptors): try again on the next wake
                return
            if len(self.pairs) >= self.max_connections:
                self.refused += 1
                client.close()
                continue
            client.setblocking(False)
            upstream = socket.socket(family, socket.SOCK_STREAM)
            upstream.setblocking(False)
            code = upstream.connect_ex(address)
            if code not in (0, *_IN_PROGRESS) or (code != 0 and family == socket.AF_UNIX):
                # Refused, absent, or (a Unix socket never completes later) a full backlog: the client is closed.
                upstream.close()
                client.close()
                continue
            pair = _Pair(client, upstream, connecting=code != 0)
            self.pairs.add(pair)
            self._update(pair)

    def _serve(self, pair: _Pair, sock: socket.socket, mask: int) -> None:
        try:
            if pair.connecting:
                code = pair.upstream.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if code:
                    raise OSError(code, os.strerror(code))
                pair.connecting = False
            elif sock is pair.client:
                if mask & selectors.EVENT_READ:
                    pair.client_eof = self._read(sock, pair.to_upstream)
                if mask & selectors.EVENT_WRITE:
                    self._write(sock, pair.to_client)
            else:
                if mask & selectors.EVENT_READ:
                    pair.upstream_eof = self._read(sock, pair.to_client)
                if mask & selectors.EVENT_WRITE:
                    self._write(sock, pair.to_upstream)
            if pair.client_eof and not pair.to_upstream and not pair.upstream_shut:
                pair.upstream_shut = True
                pair.upstream.shutdown(socket.SHUT_WR)
            if pair.upstream_eof and not pair.to_client and not pair.client_shut:
                pair.client_shut = True
                pair.client.shutdown(socket.SHUT_WR)
        except OSError:  # reset, broken pipe, refused: the connection ends for both
            self._end(pair)
            return
        if pair.done:
            self._end(pair)
        else:
            self._update(pair)

    @staticmethod
    def _read(sock: socket.socket, into: bytearray) -> bool:
        """Read what fits into ``into``; True when the peer ended its side."""
        try:
            data = sock.recv(BUFFER_BYTES - len(into))
        except (BlockingIOError, InterruptedError):
            return False
        into += data
        return not data

    @staticmethod
    def _write(sock: socket.socket, out: bytearray) -> None:
        try:
            sent = sock.send(out)
        except (BlockingIOError, InterruptedError):
            return
        del out[:sent]

    def _update(self, pair: _Pair) -> None:
        for sock in (pair.client, pair.upstream):
            wanted = pair.wanted(sock)
            if wanted == pair.masks[sock]:
                continue
            if pair.masks[sock] == 0:
                self._selector.register(sock, wanted, pair)
            elif wanted == 0:
                self._selector.unregister(sock)
            else:
                self._selector.modify(sock, wanted, pair)
            pair.masks[sock] = wanted

    def _end(self, pair: _Pair) -> None:
        for sock in (pair.client, pair.upstream):
            if pair.masks[sock]:
                with contextlib.suppress(KeyError, ValueError, OSError):
                    self._selector.unregister(sock)
            pair.masks[sock] = 0
            sock.close()
        self.pairs.discard(pair)

    def _close_everything(self) -> None:
        for pair in list(self.pairs):
            self._end(pair)
        for listener in self._listeners:
            listener.close()
        self._selector.close()
        self._wake_read.close()
        self._wake_write.close()


def main(argv: list[str]) -> int:
    split = argv.index("--")
    program = argv[split + 1 :]
    options = argv[1:split]
    max_connections = MAX_CONNECTIONS
    listeners: list[tuple[socket.socket, str]] = []
    for option in options:
        if option.startswith("--max-connections="):
            max_connections = int(option.split("=", 1)[1])
            continue
        port, path = option.split("=", 1)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", int(port)))
        listener.listen(64)
        listeners.append((listener, path))
    if listeners and os.fork() == 0:
        try:
            relay = Relay(max_connections)  # made in the relay's process: nothing of it reaches the program
            for listener, path in listeners:
                relay.listen(listener, socket.AF_UNIX, path)
            relay.run()
        finally:
            os._exit(0)
    for listener, _path in listeners:
        listener.close()
    os.execvp(program[0], program)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv))
