"""The three model wire protocols: endpoints, token usage, errors, fingerprints.

Anthropic Messages (``POST /v1/messages``), OpenAI chat completions (``POST /v1/chat/completions``)
and the OpenAI Responses API (``POST /v1/responses``), each answered as one JSON object or as
server-sent events. Nothing here touches the network: the proxy hands it bytes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

Protocol = Literal["anthropic-messages", "openai-chat", "openai-responses"]
ANTHROPIC_MESSAGES: Final = "anthropic-messages"
OPENAI_CHAT: Final = "openai-chat"
OPENAI_RESPONSES: Final = "openai-responses"
PROTOCOLS: tuple[Protocol, ...] = (ANTHROPIC_MESSAGES, OPENAI_CHAT, OPENAI_RESPONSES)

#: Path of a model call as the agent sends it (relative to the boundary's base URL) -> its protocol.
#: The Anthropic base URL is the origin; the OpenAI base URL ends in ``/v1``.
ENDPOINTS: dict[str, Protocol] = {
    "/v1/messages": ANTHROPIC_MESSAGES,
    "/v1/chat/completions": OPENAI_CHAT,
    "/v1/responses": OPENAI_RESPONSES,
}

#: Request fields that vary between two runs of one conversation (ids, cache keys): not in a call's fingerprint.
VOLATILE_FIELDS = frozenset({"metadata", "user", "prompt_cache_key", "safety_identifier", "store", "service_tier"})


def protocol_of(path: str) -> Protocol | None:
    """The protocol of a POST to ``path`` (query string removed), or None for a path that is not a model call."""
    return ENDPOINTS.get(path.rstrip("/"))


# --------------------------------------------------------------------------- server-sent events


def split_events(raw: bytes) -> list[bytes]:
    """The complete events of an SSE body (each without its blank-line terminator); a partial tail is dropped."""
    text = raw.replace(b"\r\n", b"\n")
    parts = text.split(b"\n\n")
    return [part for part in parts[:-1] if part.strip()]


def parse_event(block: bytes) -> tuple[str | None, Any]:
    """One SSE event as ``(event name, data)``: data decoded as JSON when it is, else as text."""
    name: str | None = None
    data_lines: list[str] = []
    for line in block.decode("utf-8", "replace").split("\n"):
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data_lines.append(line[5:].removeprefix(" "))
    data = "\n".join(data_lines)
    try:
        return name, json.loads(data)
    except ValueError:
        return name, data


def encode_events(events: Sequence[Sequence[Any]]) -> bytes:
    """SSE bytes for recorded ``[name, data]`` events (data as JSON unless it is text)."""
    out = []
    for name, data in events:
        payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
        out.append((f"event: {name}\n" if name else "") + f"data: {payload}\n\n")
    return "".join(out).encode()


# --------------------------------------------------------------------------- usage


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _anthropic_usage(usage: Mapping[str, Any]) -> dict[str, int]:
    cached = _int(usage.get("cache_read_input_tokens"))
    created = _int(usage.get("cache_creation_input_tokens"))
    return {
        "input_tokens": _int(usage.get("input_tokens")) + cached + created,
        "output_tokens": _int(usage.get("output_tokens")),
        "cached_input_tokens": cached,
    }


def _openai_usage(usage: Mapping[str, Any], protocol: Protocol) -> dict[str, int]:
    if protocol == OPENAI_CHAT:
        details = usage.get("prompt_tokens_details")
        return {
            "input_tokens": _int(usage.get("prompt_tokens")),
            "output_tokens": _int(usage.get("completion_tokens")),
            "cached_input_tokens": _int(details.get("cached_tokens")) if isinstance(details, Mapping) else 0,
        }
    details = usage.get("input_tokens_details")
    return {
        "input_tokens": _int(usage.get("input_tokens")),
        "output_tokens": _int(usage.get("output_tokens")),
        "cached_input_tokens": _int(details.get("cached_tokens")) if isinstance(details, Mapping) else 0,
    }


def usage_of_body(protocol: Protocol, body: Any) -> dict[str, int] | None:
    """Tokens of a JSON answer: ``input_tokens`` (every prompt token, cached ones included), ``output_tokens``,
    ``cached_input_tokens``."""
    if not isinstance(body, Mapping) or not isinstance(body.get("usage"), Mapping):
        return None
    if protocol == ANTHROPIC_MESSAGES:
        return _anthropic_usage(body["usage"])
    return _openai_usage(body["usage"], protocol)


def usage_of_events(protocol: Protocol, events: Sequence[Sequence[Any]]) -> dict[str, int] | None:
    """Tokens of a streamed answer: Anthropic's message_start and message_delta, the chat's last usage chunk,
    the Responses' ``response.completed``."""
    found: dict[str, int] | None = None
    for _name, data in events:
        if not isinstance(data, Mapping):
            continue
        if protocol == ANTHROPIC_MESSAGES:
            kind = data.get("type")
            if kind == "message_start" and isinstance(data.get("message"), Mapping):
                usage = data["message"].get("usage")
                if isinstance(usage, Mapping):
                    found = _anthropic_usage(usage)
            elif kind == "message_delta" and isinstance(data.get("usage"), Mapping):
                delta = data["usage"]
                base = found or {"input_tokens": 0, "output_tokens": 0, "cached_input_tokens": 0}
                if "input_tokens" in delta:  # a final count of everything replaces the start's
                    base = _anthropic_usage(delta)
                base["output_tokens"] = _int(delta.get("output_tokens"))
                found = base
        elif protocol == OPENAI_CHAT:
            if isinstance(data.get("usage"), Mapping):
                found = _openai_usage(data["usage"], protocol)
        elif data.get("type") in ("response.completed", "response.incomplete", "response.failed"):
            response = data.get("response")
            if isinstance(response, Mapping) and isinstance(response.get("usage"), Mapping):
                found = _openai_usage(response["usage"], protocol)
    return found


# --------------------------------------------------------------------------- errors the boundary answers itself


def error_body(protocol: Protocol, status: int, message: str) -> dict[str, Any]:
    """The protocol's own JSON error body for ``status`` (so a CLI reacts as it would to its real API)."""
    if protocol == ANTHROPIC_MESSAGES:
        kinds = {
            401: "authentication_error",
            413: "request_too_large",
            429: "rate_limit_error",
            529: "overloaded_error",
            503: "overloaded_error",
        }
        kind = kinds.get(status, "api_error" if status >= 500 else "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    kinds = {401: "invalid_api_key", 429: "rate_limit_exceeded"}
    kind = kinds.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "code": kind, "param": None}}


# --------------------------------------------------------------------------- fingerprints


def _without_volatile(value: Any, workdir: str | None) -> Any:
    if isinstance(value, str):
        return value.replace(workdir, "$WORKDIR") if workdir else value
    if isinstance(value, Mapping):
        return {
            str(k): _without_volatile(v, workdir)
            for k, v in value.items()
            if k not in VOLATILE_FIELDS and k != "cache_control"
        }
    if isinstance(value, list):
        return [_without_volatile(v, workdir) for v in value]
    return value


def conversation(protocol: Protocol, body: Any, workdir: str | None = None) -> Any:
    """What a call asks the model, for comparing two runs: the conversation so far (not the system prompt, which
    carries the date and the host), with the work directory's path written ``$WORKDIR``."""
    if not isinstance(body, Mapping):
        return body
    key = "input" if protocol == OPENAI_RESPONSES else "messages"
    messages = body.get(key)
    if protocol == OPENAI_CHAT and isinstance(messages, list):
        messages = [m for m in messages if not (isinstance(m, Mapping) and m.get("role") in ("system", "developer"))]
    return {
        "model": body.get("model"),
        "tools": sorted(
            str(t.get("name") or (t.get("function") or {}).get("name"))
            for t in body.get("tools") or ()
            if isinstance(t, Mapping)
        ),
        key: _without_volatile(messages, workdir),
    }


def fingerprint(protocol: Protocol, body: Any, workdir: str | None = None) -> str:
    """The sha256 of a call's :func:`conversation` as canonical JSON."""
    text = json.dumps(
        [protocol, conversation(protocol, body, workdir)], sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return hashlib.sha256(text.encode()).hexdigest()
