"""Inside the sandbox: listen on 127.0.0.1:PORT for each ``PORT=SOCKET`` given, relay to SOCKET, then exec the program.

The sandbox's network namespace is new and empty, so an agent whose client wants an
``http://127.0.0.1:PORT`` base URL (the model boundary) reaches it through this relay: it
binds every port first, forks one process that relays each connection to the host Unix
socket bound into the sandbox at its path, and becomes the program. It imports only the
standard library (it runs with the agent environment's Python, where certlab is absent),
and dies with the sandbox's PID namespace.

    python inner_relay.py 8765=/path/to/model.sock -- PROGRAM ARG...
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading


def pump(source: socket.socket, target: socket.socket) -> None:
    """Copy bytes one way until the source ends, then end the target's writing side."""
    try:
        while data := source.recv(1 << 16):
            target.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)


def serve(listener: socket.socket, path: str) -> None:
    """Relay every connection accepted on ``listener`` to the Unix socket ``path``."""
    while True:
        connection, _address = listener.accept()
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(path)
        except OSError:
            connection.close()
            upstream.close()
            continue
        threading.Thread(target=pump, args=(connection, upstream), daemon=True).start()
        threading.Thread(target=pump, args=(upstream, connection), daemon=True).start()


def main(argv: list[str]) -> int:
    split = argv.index("--")
    program = argv[split + 1 :]
    listeners: list[tuple[socket.socket, str]] = []
    for pair in argv[1:split]:
        port, path = pair.split("=", 1)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", int(port)))
        listener.listen(64)
        listeners.append((listener, path))
    if listeners and os.fork() == 0:
        for listener, path in listeners[1:]:
            threading.Thread(target=serve, args=(listener, path), daemon=True).start()
        serve(*listeners[0])
        os._exit(0)
    for listener, _path in listeners:
        listener.close()
    os.execvp(program[0], program)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv))
