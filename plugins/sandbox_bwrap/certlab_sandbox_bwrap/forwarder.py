"""``relay_host_ports``'s host side: a socket per port, to 127.0.0.1:PORT."""

from __future__ import annotations

import contextlib
import socket
import tempfile
import threading
from pathlib import Path

from certlab_sandbox_bwrap.inner_relay import MAX_CONNECTIONS, Relay


class HostPortForwarder:
    """Host side of ``relay_host_ports``: a Unix socket per port, each connection forwarded to ``127.0.0.1:PORT``.

    One thread relays every connection of every port (``inner_relay.Relay``), at most
    ``max_connections`` at once: one more is closed as it is accepted, so whatever a sandboxed
    program opens, the harness gains one thread and a bounded amount of memory. The sockets
    live in a new folder under ``parent`` (the temp folder when None).

    The thread ends with :meth:`close`, which waits for it: the trial forks its graders right
    after the agent's run, and a fork refuses while another thread runs (a listener thread still
    returning from ``accept`` once made a trial ``runner-broken``).
    """

    def __init__(
        self, ports: tuple[int, ...], *, max_connections: int = MAX_CONNECTIONS, parent: str | None = None
    ) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="certlab-relay-", dir=parent))
        self.sockets: dict[int, str] = {}
        self.relay = Relay(max_connections)
        for port in ports:
            path = str(self.folder / f"{port}.sock")
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(path)
            listener.listen(64)
            self.relay.listen(listener, socket.AF_INET, ("127.0.0.1", port))
            self.sockets[port] = path
        self.thread = threading.Thread(target=self.relay.run, name="certlab-relay-forwarder", daemon=True)
        self.thread.start()

    @property
    def refused(self) -> int:
        """Connections closed because ``max_connections`` were already relayed."""
        return self.relay.refused

    def close(self) -> None:
        self.relay.stop()
        self.thread.join(timeout=5.0)
        for path in self.sockets.values():
            Path(path).unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # something else was put there: left, never removed by a path walk
            self.folder.rmdir()
