"""A byte relay from 127.0.0.1 to the boundary's socket, for offline sandboxes.

Inside a sandbox whose network namespace is empty, the agent's CLI still wants an
``http://127.0.0.1:PORT`` base URL. The sandbox binds the boundary's socket folder into the
agent's namespace and starts this relay there first::

    python -m certlab_model_boundary.relay --socket /run/boundary/model.sock --port 8765

It prints ``listening 127.0.0.1:PORT`` once it accepts connections (``--port 0`` picks a free
one), then copies bytes both ways, one connection at a time per thread, until it is killed. At
most ``--max-connections`` (default :data:`MAX_CONNECTIONS`) are relayed at once: one more is
closed as it is accepted, so the relay never runs more than two threads per connection allowed.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import sys
import threading

#: Connections relayed at once; one more is closed as it is accepted.
MAX_CONNECTIONS = 32


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            target.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)


def _serve_one(client: socket.socket, path: str, slots: threading.BoundedSemaphore) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            upstream.connect(path)
        except OSError:
            return
        back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
        back.start()
        _pump(client, upstream)
        back.join()
    finally:
        client.close()
        upstream.close()
        slots.release()


def listen(port: int) -> socket.socket:
    """A listening socket on 127.0.0.1:``port`` (0: a free port)."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen(64)
    return server


def serve(server: socket.socket, path: str, max_connections: int = MAX_CONNECTIONS) -> None:
    """Accept connections on ``server`` forever, relaying each to the Unix socket ``path``, at most ``max_connections``
    at once."""
    slots = threading.BoundedSemaphore(max_connections)
    while True:
        client, _address = server.accept()
        if not slots.acquire(blocking=False):
            client.close()
            continue
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=_serve_one, args=(client, path, slots), daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", required=True, help="the model boundary's Unix socket")
    parser.add_argument("--port", type=int, default=0, help="the 127.0.0.1 port to listen on (0: a free one)")
    parser.add_argument(
        "--max-connections", type=int, default=MAX_CONNECTIONS, help="connections relayed at once; more are closed"
    )
    options = parser.parse_args(argv)
    server = listen(options.port)
    print(f"listening 127.0.0.1:{server.getsockname()[1]}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        serve(server, options.socket, options.max_connections)
    return 0


if __name__ == "__main__":
    sys.exit(main())
