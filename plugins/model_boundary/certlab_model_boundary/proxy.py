"""The model boundary: a loopback HTTP proxy to the model API, per trial.

The agent is pointed at the boundary (``agent_env``: ``ANTHROPIC_BASE_URL``, ``OPENAI_BASE_URL``,
``OPENAI_API_BASE``) and given a per-trial token as its API key; the real keys stay in this
process and are put on the forwarded request only. Every model call (Anthropic Messages,
OpenAI chat completions, OpenAI Responses; one JSON answer or server-sent events) becomes one
event: the request, what the agent received, the tokens the answer reported and the fault
that acted on it. Before a call is forwarded the declared model faults are asked
(``certlab_core.plugin.FaultContext`` with ``kind="model"``) and the budgets checked:

- a fault's ``error`` names what the boundary answers instead of the upstream:
  ``ModelRateLimited`` (HTTP 429), ``ModelServerError`` (HTTP 500), ``ModelUnavailable``
  (HTTP 503), ``ModelTimeout`` (no answer: the connection is held ``delay_s`` and dropped),
  or ``ModelStreamCut`` with ``execute`` (the upstream answers, and the agent receives only
  the first ``keep_events`` events of the stream before the connection drops);
- a spent budget (model calls, tokens) is answered HTTP 400 and noted in ``budget_exceeded``.

An error of the real upstream (401, 429, 5xx, unreachable) is relayed to the agent as it came
and noted in ``infra_error``: it is the harness's infrastructure failing, never the agent's.
Every call's status is kept in order in ``call_statuses`` (``ok``, ``upstream-429``,
``upstream-unreachable``, ``injected``, ``refused``, ``boundary-error``), even once the
recording omits events: the kernel judges a run that recovered from an upstream error by
what it left, and one whose last call failed as unavailable.
With ``replay`` the boundary has no upstream: the n-th call must ask what the n-th recorded
call asked (:func:`certlab_model_boundary.wire.fingerprint`) and receives what was recorded;
the first call that does not is noted in ``departure``.

The boundary listens on 127.0.0.1 (a free port) or on a Unix socket (``unix_socket``), which
a sandbox binds into the agent's namespace and reaches through ``certlab_model_boundary.relay``.

It runs in the harness, outside the sandbox's memory limit, so what it holds is capped
(:class:`ModelLimits`): a request body is read only up to its cap (16 MiB as sent, and as
decompressed; one past it is answered HTTP 413 without being read into memory), an answer
only up to its own (16 MiB), and at most 16 connections are served at once (one more is
answered HTTP 503). A request past a cap is the agent's doing, never infrastructure: it is
recorded as a refusal of the boundary (``limit_exceeded``, ``refused``), with its size and no
body. The recording keeps bodies in full while it holds at most ``recorded_bytes`` (4 MiB);
then each call keeps its fingerprint, sizes, sha256s and tokens without its bodies, and past
twice that, calls are only counted (``omitted``).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import http.server
import json
import os
import queue
import random
import socket
import socketserver
import sys
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from attrs import define, field, frozen

from certlab_core.plugin import Fault, FaultContext, FaultEffect
from certlab_core.plugin.types.model_boundary import (
    CALL_BOUNDARY_ERROR,
    CALL_INJECTED,
    CALL_OK,
    CALL_REFUSED,
    CALLS_BUDGET,
    TOKENS_BUDGET,
    UPSTREAM_ERROR,
)
from certlab_model_boundary import wire

DEFAULT_ANTHROPIC = "https://api.anthropic.com"
DEFAULT_OPENAI = "https://api.openai.com/v1"
UPSTREAM_TIMEOUT_S = 600.0
MAX_TEXT = 2000
REDACTED = "[redacted]"
MIN_SECRET = 8

#: The cap the agent went past, as the recording's ``limit_exceeded`` and ``refused`` name it.
REQUEST_BYTES_LIMIT = "model_request_bytes"
CONNECTIONS_LIMIT = "model_connections"
#: Refused connections waiting for their 503; past this many, one more is closed unanswered.
_REFUSAL_QUEUE = 64
_DRAIN_BYTES = 64 << 20  # what is read (and dropped) of a refused body so that the client reads its 413
_DRAIN_S = 2.0


@frozen
class ModelLimits:
    """What one trial's boundary holds at most, so that the harness's memory and the record stay bounded.

    ``request_bytes``: a request body, as sent and as decompressed (Claude Code's first call
    is about 120 KB, a full 200k-token context about 1 MB; the Anthropic API itself takes up to
    32 MB). ``response_bytes``: an upstream answer. ``connections``: agent connections served at
    once. ``recorded_bytes``: the bodies the recording keeps in full (a trial's record is a
    line of a run store, which a reader takes up to 16 MB).
    """

    request_bytes: int = 16 << 20
    response_bytes: int = 16 << 20
    connections: int = 16
    recorded_bytes: int = 4 << 20

    def document(self) -> dict[str, int]:
        return {
            "request_bytes": self.request_bytes,
            "response_bytes": self.response_bytes,
            "connections": self.connections,
            "recorded_bytes": self.recorded_bytes,
        }


class _Refused(Exception):
    """A request the boundary answers itself without reading (all of) it: too large, or not a body it can read."""

    def __init__(self, status: int, kind: str, message: str, size: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message
        self.size = size


class _AnswerTooLarge(Exception):
    """The upstream's answer passed ``ModelLimits.response_bytes``."""


#: What each fault error makes the boundary answer: an HTTP status, or None for no answer at all.
FAULT_STATUSES: dict[str, int | None] = {
    "ModelRateLimited": 429,
    "ModelServerError": 500,
    "ModelUnavailable": 503,
    "ModelTimeout": None,
    "ModelStreamCut": None,
}
MODEL_FAULT_ERRORS = tuple(FAULT_STATUSES)
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "authorization",
        "x-api-key",
        "accept-encoding",
    }
)


@frozen
class Upstream:
    """Where model calls go and with which keys: the base URLs and real keys the harness holds.

    ``anthropic`` is an origin (``https://api.anthropic.com``), ``openai`` a base ending in
    ``/v1``. ``anthropic_bearer`` sends the Anthropic key as ``Authorization: Bearer`` (it came
    from ``ANTHROPIC_AUTH_TOKEN``) instead of ``x-api-key``.
    """

    anthropic: str = DEFAULT_ANTHROPIC
    openai: str = DEFAULT_OPENAI
    anthropic_key: str | None = field(default=None, repr=False)
    openai_key: str | None = field(default=None, repr=False)
    anthropic_bearer: bool = False

    @classmethod
    def from_environment(
        cls, env: Mapping[str, str] | None = None, *, anthropic: str | None = None, openai: str | None = None
    ) -> Upstream:
        """The upstream the user configured: an option first, else the variables the CLIs themselves read."""
        source = os.environ if env is None else env
        bearer = not source.get("ANTHROPIC_API_KEY") and bool(source.get("ANTHROPIC_AUTH_TOKEN"))
        return cls(
            anthropic=anthropic or source.get("ANTHROPIC_BASE_URL") or DEFAULT_ANTHROPIC,
            openai=openai or source.get("OPENAI_BASE_URL") or source.get("OPENAI_API_BASE") or DEFAULT_OPENAI,
            anthropic_key=source.get("ANTHROPIC_API_KEY") or source.get("ANTHROPIC_AUTH_TOKEN") or None,
            openai_key=source.get("OPENAI_API_KEY") or None,
            anthropic_bearer=bearer,
        )

    def secrets(self) -> tuple[str, ...]:
        return tuple(key for key in (self.anthropic_key, self.openai_key) if key)


@frozen
class ModelBudgets:
    """The model limits of one trial: calls, and tokens (input plus output as the answers report them); None: none."""

    calls: int | None = None
    tokens: int | None = None


@define
class DeclaredModelFault:
    """One model fault declared by a condition, live in one trial: which calls it may act on and where it fired."""

    index: int
    name: str
    fault: Fault
    on_calls: tuple[int, ...] | None  # None: every model call
    params: Mapping[str, Any] = field(factory=dict)
    rng: random.Random = field(factory=random.Random)
    fired_at: list[int] = field(factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "fault": self.name,
            "tool": "model",
            "fired": bool(self.fired_at),
            "fired_at": list(self.fired_at),
        }


@frozen
class Decision:
    """What the boundary decided for one call before anything was forwarded."""

    seq: int
    call_number: int
    effect: FaultEffect | None = None
    fault: int | None = None
    keep_events: int = 1
    refusal: tuple[int, str, str] | None = None  # (status, error type, message) answered by the boundary itself


class _Serving:
    """What both listeners share: one thread per connection, each known to the owner so that stopping joins it.

    At most ``ModelLimits.connections`` are served at once; one more is handed to the owner's
    refuser, which answers it HTTP 503. The trial's process forks its graders once the agent is
    done, and refuses to fork while any thread runs: stopping the boundary leaves none behind.
    """

    owner: ModelProxy
    request_queue_size = 64  # the listen backlog: a burst of connections is accepted (and refused) quickly

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.owner._admit(request):
            return
        thread = threading.Thread(
            target=self.process_request_thread,  # type: ignore[attr-defined]
            args=(request, client_address),
            name="certlab-model-boundary-call",
            daemon=True,
        )
        self.owner._serving(thread, request)
        thread.start()

    def shutdown_request(self, request: Any) -> None:
        if request is not None:
            super().shutdown_request(request)  # type: ignore[misc]

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError | TimeoutError | OSError):
            return
        super().handle_error(request, client_address)  # type: ignore[misc]


class _Server(_Serving, http.server.ThreadingHTTPServer):
    pass


class _UnixServer(_Serving, socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    pass


class ModelProxy:
    """One trial's model boundary; start and stop it with ``with``."""

    def __init__(
        self,
        upstream: Upstream | None = None,
        *,
        faults: Sequence[DeclaredModelFault] = (),
        budgets: ModelBudgets | None = None,
        replay: Sequence[Mapping[str, Any]] | None = None,
        workdir: str | None = None,
        unix_socket: str | None = None,
        token: str | None = None,
        limits: ModelLimits | None = None,
    ) -> None:
        if upstream is None and replay is None:
            raise ValueError("a model boundary needs an upstream, or a recording to replay")
        self.upstream = upstream
        self.faults = list(faults)
        self.budgets = budgets or ModelBudgets()
        self.replay = None if replay is None else [e for e in replay if e.get("kind") == "model"]
        self.workdir = workdir
        self.unix_socket = unix_socket
        self.token = token or f"certlab-trial-{uuid.uuid4().hex}"
        self.events: list[dict[str, Any]] = []
        self.model_calls = 0
        self.tokens = {"input_tokens": 0, "output_tokens": 0, "cached_input_tokens": 0}
        self.budget_exceeded: str | None = None
        self.infra_error: str | None = None
        self.call_statuses: list[str] = []  # one per model call, kept whatever the recording omits
        self.departure: str | None = None
        self.replayed = 0
        self.limits = limits or ModelLimits()
        self.limit_exceeded: str | None = None
        self.refused = {REQUEST_BYTES_LIMIT: 0, CONNECTIONS_LIMIT: 0}
        self.omitted = {"bodies": 0, "events": 0}
        self.recorded_bytes = 0
        self._seq = 0  # every call's number in the recording, those only counted included
        self._refusals: queue.Queue[socket.socket | None] = queue.Queue(_REFUSAL_QUEUE)
        self._refuser: threading.Thread | None = None
        self._lock = threading.Lock()
        self._server: _Server | _UnixServer | None = None
        self._thread: threading.Thread | None = None
        self._calls: list[tuple[threading.Thread, socket.socket]] = []
        self._secrets = tuple(k for k in (upstream.secrets() if upstream is not None else ()) if len(k) >= MIN_SECRET)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> ModelProxy:
        if self._server is not None:
            raise RuntimeError("the model boundary is already running")
        server: _Server | _UnixServer
        if self.unix_socket is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.unix_socket)
            server = _UnixServer(self.unix_socket, _Handler)
        else:
            server = _Server(("127.0.0.1", 0), _Handler)
        server.owner = self
        self._server = server
        self._refuser = threading.Thread(target=self._refuse_each, name="certlab-model-boundary-refuser", daemon=True)
        self._refuser.start()
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="certlab-model-boundary", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, thread = self._server, self._thread
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout=10)
        with self._lock:
            calls, self._calls = self._calls, []
        for _thread, connection in calls:  # an agent's kept-alive connection would hold its thread forever
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        for call_thread, _connection in calls:
            call_thread.join(timeout=10)
        if self._refuser is not None:
            while True:  # the connections still waiting are closed unanswered
                try:
                    waiting = self._refusals.get_nowait()
                except queue.Empty:
                    break
                if waiting is not None:
                    waiting.close()
            self._refusals.put(None)
            self._refuser.join(timeout=10)
            self._refuser = None
        if self.unix_socket is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.unix_socket)
        self._server = None
        self._thread = None

    def __enter__(self) -> ModelProxy:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _serving(self, thread: threading.Thread, connection: socket.socket) -> None:
        with self._lock:
            self._calls.append((thread, connection))

    def _admit(self, connection: socket.socket) -> bool:
        """Whether a connection may be served now; one past ``limits.connections`` goes to the refuser instead."""
        with self._lock:
            self._calls = [(t, c) for t, c in self._calls if t.is_alive()]
            if len(self._calls) < self.limits.connections:
                return True
            self.refused[CONNECTIONS_LIMIT] += 1
            self.limit_exceeded = self.limit_exceeded or CONNECTIONS_LIMIT
        try:
            self._refusals.put_nowait(connection)
        except queue.Full:  # a flood: closed unanswered, and the accepting thread is never held up
            connection.close()
        return False

    def _refuse_each(self) -> None:
        """The refuser's thread: answer each connection past the cap HTTP 503, one at a time, briefly."""
        while (connection := self._refusals.get()) is not None:
            message = (
                f"certlab model boundary: this trial already has {self.limits.connections} connections open "
                "(the boundary's cap); close one, or wait"
            )
            body = json.dumps({"type": "error", "error": {"type": "overloaded_error", "message": message}}).encode()
            head = (
                "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
            )
            try:
                _read_head(connection, 0.2)
                connection.settimeout(0.2)
                connection.sendall(head.encode() + body)
                connection.shutdown(socket.SHUT_WR)
                _drain(connection, 1 << 20, 0.2)
            except OSError:
                pass
            finally:
                connection.close()

    # ------------------------------------------------------------------ what the agent is given

    @property
    def port(self) -> int:
        if self._server is None or self.unix_socket is not None:
            raise RuntimeError("the model boundary listens on no port (not started, or on a Unix socket)")
        address = self._server.server_address
        assert isinstance(address, tuple)
        return int(address[1])

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``: the Anthropic base URL (the OpenAI one is ``openai_base_url``)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    def agent_env(self, env: Mapping[str, str], base_url: str | None = None) -> dict[str, str]:
        """``env`` pointed at the boundary, with the trial's token as every API key and no real key left in it.

        ``base_url`` is where the agent reaches the boundary when that is not this process's
        port (a relay inside a sandbox).
        """
        base = (base_url or self.base_url).rstrip("/")
        out = {k: v for k, v in env.items() if k not in ("ANTHROPIC_AUTH_TOKEN",)}
        out.update(
            ANTHROPIC_BASE_URL=base,
            ANTHROPIC_API_KEY=self.token,
            OPENAI_BASE_URL=f"{base}/v1",
            OPENAI_API_BASE=f"{base}/v1",
            OPENAI_API_KEY=self.token,
        )
        return out

    # ------------------------------------------------------------------ the record

    def counts(self) -> dict[str, Any]:
        return {"model_calls": self.model_calls, **self.tokens}

    def fault_summaries(self) -> list[dict[str, Any]]:
        return [fault.summary() for fault in self.faults]

    def recording(self) -> dict[str, Any]:
        """Everything the trial's record keeps of its model traffic (JSON-able, no key in it)."""
        with self._lock:
            return {
                "events": [dict(e) for e in self.events],
                "faults": self.fault_summaries(),
                "counts": self.counts(),
                "budget_exceeded": self.budget_exceeded,
                "infra_error": self.infra_error,
                "call_statuses": list(self.call_statuses),
                "departure": self.departure,
                "replayed": None if self.replay is None else {"served": self.replayed, "recorded": len(self.replay)},
                "limits": self.limits.document(),
                "limit_exceeded": self.limit_exceeded,
                "refused": dict(self.refused),
                "recorded_bytes": self.recorded_bytes,
                "omitted": dict(self.omitted),
            }

    def _redact(self, value: Any) -> Any:
        """``value`` with every real key written ``[redacted]`` (a "key" under 8 characters is no secret to hide)."""
        if not self._secrets:
            return value
        text = json.dumps(value)
        if not any(secret in text for secret in self._secrets):
            return value
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        return json.loads(text)

    def _record(self, event: dict[str, Any]) -> None:
        """Add one call to the recording: whole while the recording is under ``limits.recorded_bytes``, then
        without its bodies, and past twice that counted only (its tokens count all the same)."""
        event = self._redact(event)
        size = len(json.dumps(event))
        cap = self.limits.recorded_bytes
        with self._lock:
            usage = event.get("usage")
            if isinstance(usage, Mapping):
                for key in self.tokens:
                    self.tokens[key] += int(usage.get(key) or 0)
            event["seq"] = self._seq
            self._seq += 1
            self.call_statuses.append(_call_status(event))
            if self.recorded_bytes + size > cap:
                event = _without_bodies(event)
                size = len(json.dumps(event))
                self.omitted["bodies"] += 1
            if self.recorded_bytes + size > 2 * cap:
                self.omitted["events"] += 1
                return
            self.recorded_bytes += size
            self.events.append(event)

    def _note_infra(self, line: str) -> None:
        with self._lock:
            self.infra_error = self.infra_error or line

    # ------------------------------------------------------------------ deciding a call

    def authorised(self, headers: Mapping[str, str]) -> bool:
        bearer = headers.get("authorization", "")
        return headers.get("x-api-key") == self.token or bearer == f"Bearer {self.token}"

    def decide(self, protocol: wire.Protocol, body: Any) -> Decision:
        """Count the call, check the budgets, ask the declared faults (in declaration order; the first error wins)."""
        with self._lock:
            seq = self._seq
            spent = self.tokens["input_tokens"] + self.tokens["output_tokens"]
            over, limit = None, None
            if self.budgets.calls is not None and self.model_calls >= self.budgets.calls:
                over, limit = CALLS_BUDGET, self.budgets.calls
            elif self.budgets.tokens is not None and spent >= self.budgets.tokens:
                over, limit = TOKENS_BUDGET, self.budgets.tokens
            if over is not None:
                self.budget_exceeded = self.budget_exceeded or over
                message = f"certlab: this trial's {over} budget ({limit}) is spent"
                return Decision(seq=seq, call_number=self.model_calls, refusal=(400, "BudgetExceeded", message))
            self.model_calls += 1
            call_number = self.model_calls
            chosen: FaultEffect | None = None
            chosen_index: int | None = None
            keep = 1
            for declared in self.faults:
                if declared.on_calls is not None and call_number not in declared.on_calls:
                    continue
                context = FaultContext(
                    kind="model",
                    name=protocol,
                    args={"model": body.get("model") if isinstance(body, Mapping) else None},
                    seq=seq,
                    call_number=call_number,
                    fired=len(declared.fired_at),
                    params=declared.params,
                    rng=declared.rng,
                )
                try:
                    effect = declared.fault.inject(context)
                except Exception as error:
                    line = f"injector-broken: fault {declared.name} raised {type(error).__name__}: {error}"
                    self.infra_error = self.infra_error or line
                    return Decision(seq=seq, call_number=call_number, refusal=(500, "BoundaryBroken", line))
                if effect is None:
                    continue
                if not isinstance(effect, FaultEffect) or (
                    effect.error is not None and effect.error not in FAULT_STATUSES
                ):
                    line = (
                        f"injector-broken: fault {declared.name} gave {effect!r}; a model fault's error is one of "
                        f"{', '.join(MODEL_FAULT_ERRORS)}"
                    )
                    self.infra_error = self.infra_error or line
                    return Decision(seq=seq, call_number=call_number, refusal=(500, "BoundaryBroken", line))
                declared.fired_at.append(seq)
                if chosen is None or (chosen.error is None and effect.error is not None):
                    chosen, chosen_index = effect, declared.index
                    keep = int(declared.params.get("keep_events", 1))
            return Decision(seq=seq, call_number=call_number, effect=chosen, fault=chosen_index, keep_events=keep)

    def next_recorded(self, protocol: wire.Protocol, body: Any) -> Mapping[str, Any] | None:
        """In a replay: the recorded call this one must be, or None (and ``departure`` says why)."""
        assert self.replay is not None
        asked = wire.fingerprint(protocol, body, self.workdir)
        with self._lock:
            position = self.replayed
            if self.departure is not None:
                return None
            if position >= len(self.replay):
                self.departure = f"model call #{position + 1}: the recording ended after {len(self.replay)} call(s)"
                return None
            event = self.replay[position]
            if event.get("name") != protocol or event.get("fingerprint") != asked:
                self.departure = (
                    f"model call #{position + 1} ({protocol}) asks something else than the recorded "
                    f"{event.get('name')} call there"
                )
                return None
            self.replayed += 1
            return event


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "certlab-model-boundary/1"
    timeout = UPSTREAM_TIMEOUT_S
    server: _Server | _UnixServer

    def log_message(self, format: str, *args: Any) -> None:
        return

    def address_string(self) -> str:
        return "boundary-client"

    def setup(self) -> None:
        super().setup()
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._upstreams: dict[tuple[str, str, int], http.client.HTTPConnection] = {}
        self.client_gone = False
        self.stream_length: int | None = None

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            for connection in self._upstreams.values():
                connection.close()

    # ------------------------------------------------------------------ plumbing

    @property
    def owner(self) -> ModelProxy:
        return self.server.owner

    def _body(self) -> bytes:
        """The request body, read up to ``limits.request_bytes`` and never past it (``_Refused`` past it)."""
        cap = self.owner.limits.request_bytes
        coding = (self.headers.get("Transfer-Encoding") or "").strip().lower()
        if coding == "chunked":
            return self._chunked_body(cap)
        if coding not in ("", "identity"):
            raise _Refused(400, "InvalidRequest", f"certlab model boundary: no Transfer-Encoding {coding[:40]!r}")
        declared = (self.headers.get("Content-Length") or "").strip()
        if not declared:
            return b""
        if not declared.isdigit():
            raise _Refused(400, "InvalidRequest", f"certlab model boundary: Content-Length {declared[:40]!r}")
        length = int(declared)
        if length > cap:
            raise _Refused(413, "RequestTooLarge", _too_large(length, cap), size=length)
        data = self.rfile.read(length)
        if len(data) < length:
            raise ConnectionError("the agent hung up in the middle of its request")
        return data

    def _chunked_body(self, cap: int) -> bytes:
        chunks: list[bytes] = []
        total = 0
        while True:
            line = self.rfile.readline(1024)
            size_text = line.split(b";", 1)[0].strip()
            if not line.endswith(b"\n") or not size_text or len(size_text) > 16:
                raise _Refused(400, "InvalidRequest", "certlab model boundary: a malformed chunk of the request")
            try:
                size = int(size_text, 16)
            except ValueError:
                raise _Refused(400, "InvalidRequest", "certlab model boundary: a malformed chunk size") from None
            if size == 0:
                break
            total += size
            if total > cap:
                raise _Refused(413, "RequestTooLarge", _too_large(total, cap, at_least=True), size=total)
            data = self.rfile.read(size)
            if len(data) < size:
                raise ConnectionError("the agent hung up in the middle of its request")
            chunks.append(data)
            if self.rfile.read(2) != b"\r\n":
                raise _Refused(400, "InvalidRequest", "certlab model boundary: a chunk not ended by CRLF")
        for _ in range(64):  # trailers, up to the blank line
            if self.rfile.readline(8192) in (b"\r\n", b"\n", b""):
                break
        return b"".join(chunks)

    def _answer(self, response: http.client.HTTPResponse) -> bytes:
        """An upstream answer, read up to ``limits.response_bytes`` (``_AnswerTooLarge`` past it)."""
        cap = self.owner.limits.response_bytes
        declared = response.getheader("Content-Length") or ""
        if declared.isdigit() and int(declared) > cap:
            response.close()
            raise _AnswerTooLarge(f"the upstream's answer is {declared} bytes, past the boundary's {cap}-byte cap")
        chunks: list[bytes] = []
        total = 0
        while data := response.read(65536):
            total += len(data)
            if total > cap:
                response.close()
                raise _AnswerTooLarge(f"the upstream's answer passed the boundary's {cap}-byte cap")
            chunks.append(data)
        return b"".join(chunks)

    def _refuse(self, refused: _Refused) -> None:
        """Answer a request the boundary read no (whole) body of, and end the connection (what is left is unread)."""
        path = urlsplit(self.path).path.rstrip("/")
        protocol = wire.protocol_of(path)
        owner = self.owner
        if refused.status == 413:
            with owner._lock:
                owner.refused[REQUEST_BYTES_LIMIT] += 1
                owner.limit_exceeded = owner.limit_exceeded or REQUEST_BYTES_LIMIT
        if protocol is not None:
            event: dict[str, Any] = {
                "kind": "model",
                "name": protocol,
                "args": {"path": path, "stream": None, "body": None, "bytes": refused.size},
                "fingerprint": None,
                "workdir": owner.workdir,
            }
            owner._record(_error_event(event, refused.status, refused.kind, refused.message, executed=False))
            answer = wire.error_body(protocol, refused.status, refused.message)
        else:
            answer = {"error": {"message": refused.message}}
        self.close_connection = True
        self._send_json(refused.status, answer, extra=[("Connection", "close")])
        with contextlib.suppress(OSError):  # the client reads its answer once it has sent its body: dropped, unheld
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_WR)
            _drain(self.connection, _DRAIN_BYTES, _DRAIN_S)

    def _send(self, status: int, payload: bytes, content_type: str = "application/json", extra: Any = ()) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            for name, value in extra:
                self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)
        except OSError:  # the agent hung up: what it was sent is already recorded
            self._gone()

    def _send_json(self, status: int, body: Any, extra: Any = ()) -> None:
        self._send(status, json.dumps(body).encode(), extra=extra)

    def _drop(self) -> None:
        """End the connection without (the rest of) an answer."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)

    def _gone(self) -> None:
        self.client_gone = True
        self.close_connection = True

    def _start_stream(self, status: int, length: int | None = None) -> None:
        """The answer's head: with ``length`` the body follows as is, else in chunks (``_chunk``, ``_end_stream``)."""
        self.stream_length = length
        try:
            self.send_response(status)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            if length is None:
                self.send_header("Transfer-Encoding", "chunked")
            else:
                self.send_header("Content-Length", str(length))
            self.end_headers()
        except OSError:
            self._gone()

    def _chunk(self, data: bytes) -> None:
        if data and not self.client_gone:
            try:
                self.wfile.write(data if self.stream_length is not None else b"%x\r\n%s\r\n" % (len(data), data))
            except OSError:
                self._gone()

    def _end_stream(self) -> None:
        if not self.client_gone and self.stream_length is None:
            try:
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                self._gone()

    def _connection_to(self, base: str) -> tuple[http.client.HTTPConnection, str]:
        parts = urlsplit(base)
        scheme = parts.scheme or "http"
        port = parts.port or (443 if scheme == "https" else 80)
        host = parts.hostname or "127.0.0.1"
        key = (scheme, host, port)
        connection = self._upstreams.get(key)
        if connection is None:
            cls = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
            connection = cls(host, port, timeout=UPSTREAM_TIMEOUT_S)
            self._upstreams[key] = connection
        return connection, parts.path.rstrip("/")

    # ------------------------------------------------------------------ requests

    def do_HEAD(self) -> None:
        self._send(200, b"", "text/plain")

    def do_GET(self) -> None:
        path = urlsplit(self.path).path.rstrip("/") or "/"
        if path == "/":
            self._send(200, b"certlab model boundary\n", "text/plain")
        elif path in ("/v1/models", "/models") and self.owner.upstream is None:
            self._send_json(200, {"object": "list", "data": []})
        elif path in ("/v1/models", "/models"):
            self._aux("GET", b"")
        else:
            self._send_json(404, {"error": {"message": f"certlab model boundary: no endpoint GET {path}"}})

    def do_POST(self) -> None:
        self.client_gone = False
        try:
            self._post()
        except _Refused as refused:  # the agent's request, past a cap or unreadable: answered, never infrastructure
            self._refuse(refused)
        except ConnectionError:  # the agent hung up mid-request: nothing to answer
            self.close_connection = True
        except Exception as error:  # the boundary's own failure: infrastructure, never the agent's
            line = f"model-boundary-broken: {type(error).__name__}: {error}"[:MAX_TEXT]
            self.owner._note_infra(line)
            with self.owner._lock:
                self.owner.call_statuses.append(CALL_BOUNDARY_ERROR)
            self._drop()

    def _post(self) -> None:
        split = urlsplit(self.path)
        path = split.path.rstrip("/")
        raw = self._body()
        headers = {k.lower(): v for k, v in self.headers.items()}
        protocol = wire.protocol_of(path)
        if protocol is None:
            if path == "/v1/messages/count_tokens":
                self._aux("POST", raw)
                return
            self._send_json(404, {"error": {"message": f"certlab model boundary: no endpoint POST {path}"}})
            return
        cap = self.owner.limits.request_bytes
        try:
            text: bytes | None = _decoded(raw, headers.get("content-encoding", ""), cap)
        except (OSError, zlib.error, EOFError):
            text = None  # forwarded as it came; the record keeps no body it cannot read
        if text is not None and len(text) > cap:
            raise _Refused(413, "RequestTooLarge", _too_large(len(text), cap, at_least=True, decoded=True), len(raw))
        try:
            body: Any = json.loads(text) if text else None
        except (ValueError, RecursionError):
            body = None
        owner = self.owner
        stream = isinstance(body, Mapping) and body.get("stream") is True
        args = {"path": path, "stream": stream, "body": body}
        base_event: dict[str, Any] = {
            "kind": "model",
            "name": protocol,
            "args": args,
            "fingerprint": wire.fingerprint(protocol, body, owner.workdir),
            "workdir": owner.workdir,
        }
        args["bytes"] = len(raw)
        if not owner.authorised(headers):
            message = "certlab model boundary: this request does not carry the trial's token"
            owner._note_infra("model-boundary: a model call without the trial's token (the agent's key is not ours)")
            owner._record(_error_event(base_event, 401, "Unauthorised", message, executed=False))
            self._send_json(401, wire.error_body(protocol, 401, message))
            return
        decision = owner.decide(protocol, body)
        if decision.refusal is not None:
            status, kind, message = decision.refusal
            owner._record(_error_event(base_event, status, kind, message, executed=False))
            self._send_json(status, wire.error_body(protocol, status, message))
            return
        effect = decision.effect
        base_event["fault"] = decision.fault
        if effect is not None and effect.delay_s > 0 and effect.error != "ModelTimeout":
            time.sleep(effect.delay_s)
        if effect is not None and effect.error is not None and not effect.execute:
            self._inject(protocol, base_event, effect)
            return
        if owner.replay is not None:
            self._serve_recorded(protocol, body, base_event)
            return
        cut = decision.keep_events if effect is not None and effect.error == "ModelStreamCut" else None
        self._forward(protocol, split.query, path, raw, headers, base_event, cut)

    def _inject(self, protocol: wire.Protocol, event: dict[str, Any], effect: FaultEffect) -> None:
        assert effect.error is not None
        status = FAULT_STATUSES[effect.error]
        message = effect.message or f"certlab: injected {effect.error}"
        if status is None:  # ModelTimeout (or a cut with nothing to cut): no answer at all
            time.sleep(effect.delay_s)
            self.owner._record(
                _error_event(event, None, effect.error, message, executed=False, dropped=True, delay_s=effect.delay_s)
            )
            self._drop()
            return
        self.owner._record(_error_event(event, status, effect.error, message, executed=False))
        extra = [("retry-after", "0")] if status == 429 else []
        self._send_json(status, wire.error_body(protocol, status, message), extra=extra)

    def _serve_recorded(self, protocol: wire.Protocol, body: Any, event: dict[str, Any]) -> None:
        owner = self.owner
        recorded = owner.next_recorded(protocol, body)
        if recorded is None:
            message = f"certlab replay: the agent left the recording ({owner.departure})"
            self._send_json(500, wire.error_body(protocol, 500, message))
            return
        result = recorded.get("result") or {}
        if result.get("omitted"):
            with owner._lock:
                owner.departure = owner.departure or (
                    f"model call #{owner.replayed}: the recording kept no answer for it (past its recorded_bytes cap)"
                )
            self._send_json(500, wire.error_body(protocol, 500, f"certlab replay: {owner.departure}"))
            return
        then = recorded.get("workdir")
        if isinstance(then, str) and then and owner.workdir and then != owner.workdir:
            # The recorded answers name the recorded work copy (a tool call's path): this run's is elsewhere.
            result = json.loads(json.dumps(result).replace(then, owner.workdir))
        replayed = {**event, **{k: recorded.get(k) for k in ("status", "error", "usage", "fault")}, "result": result}
        replayed["source"] = "replay"
        owner._record(replayed)
        if result.get("dropped"):
            time.sleep(float(result.get("delay_s") or 0.0))
            self._drop()
            return
        status = int(result.get("http_status") or 200)
        if result.get("events") is not None:
            self._start_stream(status)
            self._chunk(wire.encode_events(result["events"]))
            if result.get("cut"):
                self._drop()
                return
            self._end_stream()
            return
        extra = [("retry-after", "0")] if status == 429 else []
        self._send_json(status, result.get("body"), extra=extra)

    def _aux(self, method: str, raw: bytes) -> None:
        """A request that is not a model call (token counting, the model list): forwarded with the key, not recorded."""
        owner = self.owner
        upstream = owner.upstream
        headers = {k.lower(): v for k, v in self.headers.items()}
        if upstream is None or not owner.authorised(headers):
            self._send_json(401 if upstream is not None else 404, {"error": {"message": "certlab model boundary"}})
            return
        path = urlsplit(self.path).path
        anthropic = path.startswith("/v1/messages")
        try:
            response, _ = self._upstream_call(method, anthropic, self.path, raw, headers)
            payload = self._answer(response)
        except OSError as error:
            self._send_json(502, {"error": {"message": f"certlab model boundary: upstream unreachable ({error})"}})
            return
        except _AnswerTooLarge as error:
            owner._note_infra(f"model-upstream-oversized: {error}")
            self._send_json(502, {"error": {"message": f"certlab model boundary: {error}"}})
            return
        self._send(response.status, payload, response.getheader("Content-Type") or "application/json")

    def _upstream_call(
        self, method: str, anthropic: bool, full_path: str, raw: bytes, headers: Mapping[str, str]
    ) -> tuple[http.client.HTTPResponse, float]:
        upstream = self.owner.upstream
        assert upstream is not None
        base = upstream.anthropic if anthropic else upstream.openai
        relative = full_path if anthropic else full_path.removeprefix("/v1")
        out = {k: v for k, v in headers.items() if k not in _HOP_BY_HOP}
        out["accept-encoding"] = "identity"
        key = upstream.anthropic_key if anthropic else upstream.openai_key
        if key:
            if anthropic and not upstream.anthropic_bearer:
                out["x-api-key"] = key
            else:
                out["authorization"] = f"Bearer {key}"
        started = time.perf_counter()
        for attempt in (1, 2):
            connection, prefix = self._connection_to(base)
            try:
                connection.request(method, prefix + relative, body=raw if method == "POST" else None, headers=out)
                return connection.getresponse(), started
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                connection.close()  # a kept-alive connection the upstream closed: once more, on a new one
                self._upstreams.clear()
                if attempt == 2:
                    raise
            except OSError:  # refused or timed out: the connection is spent, and the agent's next call makes a new one
                connection.close()
                self._upstreams.clear()
                raise
        raise AssertionError("unreachable")

    def _forward(
        self,
        protocol: wire.Protocol,
        query: str,
        path: str,
        raw: bytes,
        headers: Mapping[str, str],
        event: dict[str, Any],
        cut: int | None,
    ) -> None:
        owner = self.owner
        full_path = path + (f"?{query}" if query else "")
        try:
            response, started = self._upstream_call(
                "POST", protocol == wire.ANTHROPIC_MESSAGES, full_path, raw, headers
            )
        except OSError as error:
            message = f"certlab model boundary: the upstream is unreachable ({type(error).__name__}: {error})"
            reason = f"{type(error).__name__}: {error}"
            owner._note_infra(f"model-upstream-unreachable: Unable to connect to the upstream ({reason})"[:MAX_TEXT])
            owner._record({**_error_event(event, 502, "UpstreamUnreachable", message[:MAX_TEXT]), "source": "upstream"})
            self._send_json(502, wire.error_body(protocol, 502, message))
            return
        status = response.status
        content_type = response.getheader("Content-Type") or ""
        if "text/event-stream" in content_type and status < 400:
            self._relay_stream(protocol, response, event, started, cut)
            return
        try:
            payload = self._answer(response)
        except _AnswerTooLarge as error:  # the upstream's doing (or the harness's), never the agent's
            message = f"certlab model boundary: {error}"
            owner._note_infra(f"model-upstream-oversized: {error}")
            owner._record({**_error_event(event, 502, "UpstreamOversized", message), "source": "upstream"})
            self._send_json(502, wire.error_body(protocol, 502, message))
            return
        if status >= 400:
            try:
                answered: Any = json.loads(payload)
            except (ValueError, RecursionError):
                answered = payload.decode("utf-8", "replace")[:MAX_TEXT]
            owner._note_infra(f"model-upstream: the {protocol} upstream answered HTTP {status}")
            owner._record(
                {
                    **event,
                    "status": "error",
                    "result": {"http_status": status, "body": answered},
                    "error": {"type": f"Upstream{status}", "message": f"the upstream answered HTTP {status}"},
                    "usage": None,
                    "source": "upstream",
                    "upstream_s": round(time.perf_counter() - started, 6),
                }
            )
            extra = [(k, v) for k, v in response.getheaders() if k.lower() in ("retry-after",)]
            self._send(status, payload, content_type or "application/json", extra=extra)
            return
        try:
            answered = json.loads(payload)
        except (ValueError, RecursionError):
            answered = payload.decode("utf-8", "replace")
        owner._record(
            {
                **event,
                "status": "ok",
                "result": {"http_status": status, "body": answered},
                "error": None,
                "usage": wire.usage_of_body(protocol, answered),
                "source": "upstream",
                "upstream_s": round(time.perf_counter() - started, 6),
            }
        )
        self._send(status, payload, content_type or "application/json")

    def _relay_stream(
        self,
        protocol: wire.Protocol,
        response: http.client.HTTPResponse,
        event: dict[str, Any],
        started: float,
        cut: int | None,
    ) -> None:
        """Forward the upstream's events as they arrive; with ``cut``, only that many, then drop the connection.

        Uncut, the bytes go on as they come (with the upstream's length when it gave one), one read
        behind: the last piece is sent only once the call is recorded, so an agent never holds an
        answer the record does not. They are split into events once, at the end.
        """
        length = response.getheader("Content-Length")
        self._start_stream(response.status, int(length) if cut is None and length and length.isdigit() else None)
        raw: list[bytes] = []
        sent: list[bytes] = []
        pending = b""
        total, cap, oversized = 0, self.owner.limits.response_bytes, False
        while True:
            data = response.read1(65536)
            total += len(data)
            if total > cap:  # the upstream's doing: what was relayed is recorded, then the connection drops
                response.close()
                oversized = True
                self.owner._note_infra(f"model-upstream-oversized: the upstream's stream passed the {cap}-byte cap")
                break
            if not data:
                response.close()  # read1 leaves a fully read response open, and the kept-alive connection stuck
                break
            if cut is None:
                if raw:
                    self._chunk(raw[-1])
                raw.append(data)
                continue
            raw.append(data)
            pending += data
            complete = wire.split_events(pending)
            if complete:
                normal = pending.replace(b"\r\n", b"\n")
                pending = normal[normal.rfind(b"\n\n") + 2 :]
                room = complete[: max(cut - len(sent), 0)]
                if room:
                    self._chunk(b"".join(block + b"\n\n" for block in room))
                    sent.extend(room)
        if oversized and cut is None:  # the last piece held back was never sent: the agent has the rest
            sent = wire.split_events(b"".join(raw[:-1]))
            cut = len(sent)
        whole = b"".join(raw) + (b"" if oversized else b"\n\n")
        parsed = [wire.parse_event(block) for block in wire.split_events(whole)]
        received = [list(pair) for pair in (parsed if cut is None else map(wire.parse_event, sent))]
        usage = wire.usage_of_events(protocol, parsed)
        record: dict[str, Any] = {
            **event,
            "status": "ok" if cut is None else "error",
            "result": {
                "http_status": response.status,
                "events": received,
                "cut": cut is not None,
                "agent_hung_up": self.client_gone,
            },
            "error": None
            if cut is None
            else {
                "type": "UpstreamOversized" if oversized else "ModelStreamCut",
                "message": f"the stream was cut after {len(sent)} event(s)"
                + (f": it passed the boundary's {cap}-byte cap" if oversized else ""),
            },
            "usage": usage,
            "source": "upstream",
            "upstream_s": round(time.perf_counter() - started, 6),
        }
        self.owner._record(record)
        if cut is not None:
            self._drop()
            return
        if raw:
            self._chunk(raw[-1])
        self._end_stream()


def _call_status(event: Mapping[str, Any]) -> str:
    """A recorded call's status (the kernel's ``judged_status`` reads them): what answered it, and how."""
    if event.get("status") == "ok":
        return CALL_OK
    error = event.get("error")
    kind = str(error.get("type") or "") if isinstance(error, Mapping) else ""
    if kind in ("Unauthorised", "BoundaryBroken"):
        return CALL_BOUNDARY_ERROR
    if kind.startswith("Upstream"):  # Upstream429, UpstreamUnreachable, UpstreamOversized
        what = kind.removeprefix("Upstream")
        return f"{UPSTREAM_ERROR}{what.lower()}"
    if event.get("fault") is not None and kind in FAULT_STATUSES:
        return CALL_INJECTED
    return CALL_REFUSED  # a budget, a cap or a malformed request: the agent's own doing


def _decoded(raw: bytes, encoding: str, cap: int) -> bytes:
    """A request body as JSON text, when a CLI compressed it (gzip, deflate): at most ``cap + 1`` bytes of it.

    A small compressed body can stand for gigabytes: it is never decompressed past the cap.
    """
    encoding = encoding.strip().lower()
    if encoding not in ("gzip", "deflate"):
        return raw
    inflater = zlib.decompressobj(wbits=31 if encoding == "gzip" else 15)
    text = inflater.decompress(raw, cap + 1)
    if len(text) <= cap and not inflater.eof and not inflater.unconsumed_tail:
        raise EOFError("a compressed body that ends before its end")
    return text


def _too_large(size: int, cap: int, *, at_least: bool = False, decoded: bool = False) -> str:
    what = "decompressed, is" if decoded else "is"
    amount = f"over {cap}" if at_least else str(size)
    return (
        f"certlab model boundary: the request body, {what} {amount} bytes, past this trial's cap of {cap} bytes "
        "(request_too_large)"
    )


def _read_head(connection: socket.socket, seconds: float) -> None:
    """Read a request's head (to its blank line, 64 KiB or ``seconds`` at most) so that the answer is not lost."""
    deadline = time.monotonic() + seconds
    tail, seen = b"", 0
    while b"\r\n\r\n" not in tail and seen < 65536:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        connection.settimeout(remaining)
        data = connection.recv(4096)
        if not data:
            return
        seen += len(data)
        tail = tail[-3:] + data


def _drain(connection: socket.socket, most: int, seconds: float) -> None:
    """Read and drop what the client still sends, up to ``most`` bytes or ``seconds``, holding 64 KiB at most."""
    deadline = time.monotonic() + seconds
    left = most
    while left > 0:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        connection.settimeout(remaining)
        data = connection.recv(min(65536, left))
        if not data:
            return
        left -= len(data)


def _digest(value: Any) -> dict[str, Any]:
    text = json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    return {"bytes": len(text), "sha256": hashlib.sha256(text).hexdigest()}


def _without_bodies(event: Mapping[str, Any]) -> dict[str, Any]:
    """``event`` with its request and answer bodies replaced by their size and sha256 (``omitted``)."""
    out = dict(event)
    args = dict(out.get("args") or {})
    if args.get("body") is not None:
        args["body"] = None
        args["omitted"] = _digest(event["args"]["body"])
    out["args"] = args
    result = out.get("result")
    if isinstance(result, Mapping):
        kept = dict(result)
        for key in ("body", "events"):
            if kept.get(key) is not None:
                kept["omitted"] = _digest(kept[key])
                kept[key] = None
        out["result"] = kept
    return out


def _error_event(
    event: Mapping[str, Any],
    status: int | None,
    kind: str,
    message: str,
    *,
    executed: bool = True,
    dropped: bool = False,
    delay_s: float = 0.0,
) -> dict[str, Any]:
    result: dict[str, Any] = {"http_status": status, "body": None}
    if dropped:
        result.update(dropped=True, delay_s=delay_s)
    out = {
        **event,
        "status": "error",
        "result": result,
        "error": {"type": kind, "message": message},
        "usage": None,
        "source": "boundary",
    }
    if not executed:
        out["executed"] = False
    return out


def declared_model_faults(
    declarations: Sequence[Mapping[str, Any]], lookup: Callable[[str], Fault], seed: int
) -> list[DeclaredModelFault]:
    """Live faults for one trial from ``{"index", "fault", "on_calls", "params"}`` declarations.

    ``lookup`` finds a fault record by its name."""
    out: list[DeclaredModelFault] = []
    for declaration in declarations:
        on_calls = declaration.get("on_calls", (1,))
        index = int(declaration.get("index", len(out)))
        out.append(
            DeclaredModelFault(
                index=index,
                name=str(declaration["fault"]),
                fault=lookup(str(declaration["fault"])),
                on_calls=None if on_calls == "all" else tuple(int(n) for n in on_calls),
                params=dict(declaration.get("params") or {}),
                rng=random.Random(f"{seed}/fault/{index}"),
            )
        )
    return out
