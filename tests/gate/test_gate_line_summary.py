"""The gate reads a sealed line's ``_gate`` summary from the line's head alone, exactly as a full parse reads it.

The head is a fixed window of bytes (``_SUMMARY_WINDOW``); a summary longer than it (a long
error) or a character cut at its end must still read back whole, and a line that is not
UTF-8 is refused, never read around.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from certlab_core.gate.store import seal_line
from certlab_core.gate.summaries import _SUMMARY_WINDOW, _summary_of_bytes

ERRORS = st.one_of(
    st.none(),
    st.text(max_size=3 * _SUMMARY_WINDOW),
    # Many multi-byte characters, so one of them straddles the window's end.
    st.text(alphabet='éü€😀\u2028\\"', min_size=_SUMMARY_WINDOW // 4, max_size=_SUMMARY_WINDOW),
)


def _line(error: str | None, events: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "schema": "certlab.trial/1",
        "id": "candidate/clean/3",
        "attempt": 1,
        "outcome": "error" if error is not None else "success",
        "error": error,
        "failure_mode": None,
        "faults": [{"index": 0, "fired": True}],
        "contract_violations": [],
        "events": events,
        "identity": "i" * 64,
        "manifest_seal": "m" * 64,
        "seed": 10,
    }


@settings(max_examples=150, deadline=None)
@given(error=ERRORS, calls=st.integers(min_value=0, max_value=40))
def test_the_summary_read_from_the_head_equals_the_one_parsed_whole(error: str | None, calls: int) -> None:
    events = [{"seq": i, "kind": "tool", "name": "reserve", "status": "ok", "fault": None} for i in range(calls)]
    raw = seal_line(_line(error, events)).rstrip("\n").encode("utf-8")
    summary, wrong = _summary_of_bytes(raw)
    assert wrong is None
    assert summary == json.loads(raw)["_gate"]


def test_a_sealed_line_that_is_not_utf8_is_refused_not_read_around() -> None:
    text = seal_line(_line("boom", [])).rstrip("\n")
    at = text.index("boom")
    broken = text[:at].encode() + b"\xff\xfe" + text[at + 4 :].encode()
    # Reseal over the raw bytes, as a forger would: the seal holds, the text is still not UTF-8.
    body = broken.replace(b',"seal":"' + json.loads(text)["seal"].encode() + b'"', b"")
    seal = hashlib.sha256(body).hexdigest().encode()
    resealed = broken.replace(json.loads(text)["seal"].encode(), seal)
    summary, wrong = _summary_of_bytes(resealed)
    assert summary is None and wrong is not None and "not JSON" in wrong
