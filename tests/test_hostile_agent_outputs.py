"""The adapters' judges of what a real agent CLI printed, fed arbitrary and mutated bytes.

Claude Code's JSON result, Codex's JSON lines and aider's text are read by each adapter's
``judge`` (the status, the detail) and by ``certlab_usage`` (the figures, which have property
tests of their own in ``plugins/usage/tests``). Whatever the CLI printed, a judge answers with
an outcome of a known status and a detail of one line: never an exception (which the lab would
turn into "the adapter raised AttributeError"), never a hang.

Measured before these tests: Codex's judge raised ``AttributeError`` on a ``turn.failed`` whose
``error`` is a string and on an ``item`` that is not an object; both JSON judges raised
``RecursionError`` on a line nested 100,000 deep; a model error of several lines gave a detail
of several lines.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import get_args

import pytest
from certlab_aider.plugin import judge as judge_aider
from certlab_claude_code.plugin import judge as judge_claude
from certlab_codex.plugin import judge as judge_codex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from certlab_core.plugin import AgentOutcome
from certlab_core.plugin.types.agent import AgentStatus

FIXTURES = Path(__file__).resolve().parent.parent / "plugins" / "usage" / "tests" / "fixtures" / "agent_outputs"
Judge = Callable[[AgentOutcome], AgentOutcome]
JUDGES: dict[str, Judge] = {"claude_code": judge_claude, "codex": judge_codex, "aider": judge_aider}
RECORDED = {name: sorted(FIXTURES.glob(f"{name}_*")) for name in JUDGES}
STATUSES = ("completed", "timeout", "crashed", "unavailable")


def outcome(stdout: str, status: str = "completed", exit_code: int | None = 0) -> AgentOutcome:
    return AgentOutcome(status=status, exit_code=exit_code, stdout_tail=stdout, stderr_tail="", wall_s=1.0)  # type: ignore[arg-type]


def check(judge: Judge, given_outcome: AgentOutcome) -> None:
    judged = judge(given_outcome)
    assert isinstance(judged, AgentOutcome)
    assert judged.status in get_args(AgentStatus)
    assert "\n" not in (judged.detail or ""), f"a detail of several lines: {judged.detail!r}"


def test_every_adapter_has_recorded_outputs_to_mutate() -> None:
    assert all(RECORDED.values()), RECORDED


@pytest.mark.parametrize(
    ("name", "stdout"),
    [
        ("codex", '{"type": "turn.failed", "error": "the model went away"}'),
        ("codex", '{"type": "item.completed", "item": "file_change"}\n{"type": "turn.completed", "usage": {}}'),
        ("codex", '{"type": "error", "message": "line one\\nline two"}'),
        ("codex", "[" * 100_000),
        ("claude_code", '{"a": ' * 100_000),
        ("claude_code", '{"type": "result", "is_error": true, "api_error_status": 500, "result": "one\\ntwo"}'),
        ("claude_code", '{"type": "result", "subtype": "a\\nb", "num_turns": 2}'),
    ],
)
def test_the_measured_outputs_get_an_outcome_of_one_line(name: str, stdout: str) -> None:
    check(JUDGES[name], outcome(stdout))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(JUDGES)), text=st.text(), status=st.sampled_from(STATUSES))
def test_arbitrary_text_gets_an_outcome(name: str, text: str, status: str) -> None:
    check(JUDGES[name], outcome(text, status))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), name=st.sampled_from(sorted(JUDGES)), exit_code=st.sampled_from([0, 1, None]))
def test_mutated_recorded_outputs_get_an_outcome(data: st.DataObject, name: str, exit_code: int | None) -> None:
    recorded = bytearray(data.draw(st.sampled_from(RECORDED[name])).read_bytes())
    for _ in range(data.draw(st.integers(min_value=1, max_value=8))):
        at = data.draw(st.integers(min_value=0, max_value=max(len(recorded) - 1, 0)))
        how = data.draw(st.sampled_from(["flip", "cut", "insert", "repeat"]))
        if how == "flip" and recorded:
            recorded[at] = data.draw(st.integers(min_value=0, max_value=255))
        elif how == "cut":
            del recorded[at : at + data.draw(st.integers(min_value=1, max_value=64))]
        elif how == "insert":
            recorded[at:at] = data.draw(st.sampled_from([b"{", b"[", b'"', b"\n", b"\x00", b"\xff", b"null", b"\\"]))
        else:
            recorded[at:at] = recorded[at : at + 200] * 3
    check(JUDGES[name], outcome(recorded.decode("utf-8", "replace"), "completed", exit_code))
