"""certlab-mcp-boundary: command agents that speak MCP, run as gate arms through the relay and the harness's boundary.

Each trial starts a real MCP client program, which launches the relay over stdio; the
harness's MCP server (the official SDK) serves it, and every tool call crosses the trial's
recorded tool boundary, so faults, budgets, the record and replays are the gate's own.
Most clients here speak JSON-RPC by hand (as an agent CLI in any language would, and fast to
start); one pair uses the SDK's own client.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from certlab_core._runtime.registry import discover
from certlab_core.gate.boundary import Boundary, Budgets, DeclaredFault, Tools
from certlab_core.plugin import BoundaryBroken, BudgetExceeded

HERE = Path(__file__).resolve().parent
ADD_DOWN_ONCE = {"fault": "tool_error_once", "tool": "add", "on_calls": [1], "params": {"error": "ToolUnavailable"}}


def descriptor(baseline: str, candidate: str, n: int = 1, faults: Any = (ADD_DOWN_ONCE,), **changes: Any) -> Any:
    data: dict[str, Any] = {
        "schema": "certlab.experiment/1",
        "experiment": "mcp-counter",
        "task": {"world": "counter_world:toolset", "input": {"target": 3}},
        "oracle": "counter_world:oracle",
        "arms": {"baseline": {"agent": f"agents:{baseline}"}, "candidate": {"agent": f"agents:{candidate}"}},
        "conditions": [{"name": "add-down-once", "bucket": "falsify", "faults": list(faults)}],
        "rule": {"name": "clopper-pearson", "alpha": 0.05, "delta": 0.1, "looks": 1},
        "n_per_arm": n,
        "seed": 11,
        "budgets": {"tool_calls": 20, "seconds": 60},
    }
    data.update(changes)
    return data


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}


def certlab(*args: str, temp: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = _env() | ({"TMPDIR": str(temp)} if temp is not None else {})
    return subprocess.run(
        [sys.executable, "-m", "certlab_core.cli", *args], capture_output=True, text=True, env=env, timeout=300
    )


def run(tmp_path: Path, data: Any, temp: Path | None = None) -> tuple[int, list[dict[str, Any]], Path, str]:
    path = tmp_path / "certlab.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    result = certlab("run", str(path), "--out", str(tmp_path / "runs"), "-q", "-w", "2", temp=temp)
    stores = sorted((tmp_path / "runs").glob("*/trials.jsonl"))
    assert stores, result.stdout + result.stderr
    trials = [json.loads(line) for line in stores[0].read_text().splitlines() if line.strip()]
    return result.returncode, trials, stores[0].parent, result.stdout + result.stderr


def arm(trials: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [t for t in trials if t["arm"] == name]


@pytest.fixture(scope="module")
def counter_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, list[dict[str, Any]], Path, str]]:
    # The baseline is the official SDK's client, the candidate a client written by hand: both are MCP clients.
    yield run(tmp_path_factory.mktemp("counter"), descriptor("sdk_careful", "careless", n=2))


def counter_boundary(faults: list[DeclaredFault] | None = None, tool_calls: int | None = None) -> Boundary:
    """A real tool boundary over the counter world, as a trial's process holds it."""
    sys.path.insert(0, str(HERE))
    import counter_world

    return Boundary(counter_world.toolset({"target": 3}, 0), faults or [], Budgets(tool_calls=tool_calls))


def run_here(name: str, boundary: Boundary) -> Any:
    """Run one of the test arms in this process over ``boundary``, as a trial's process does."""
    import agents

    return getattr(agents, name)({"target": 3}, Tools.over(boundary), random.Random(0))


def test_mcp_command_arms_cross_the_recorded_boundary_with_its_faults(
    counter_run: tuple[int, list[dict[str, Any]], Path, str],
) -> None:
    code, trials, _store, output = counter_run
    assert len(arm(trials, "baseline")) == len(arm(trials, "candidate")) == 2, output
    for trial in arm(trials, "baseline"):  # retries the add the fault failed: reaches the target
        assert trial["outcome"] == "success", trial
        assert [e["name"] for e in trial["events"]] == ["add"] * 4
        assert trial["events"][0]["error"]["type"] == "ToolUnavailable" and trial["events"][0]["fault"] == 0
        assert trial["faults"][0]["fired_at"] == [0]
        assert trial["agent"]["returned"]["tool_calls"] == 4
        assert trial["agent"]["status"] == "completed"
    for trial in arm(trials, "candidate"):  # takes the failed add for done: one short
        assert (trial["outcome"], trial["failure_mode"]) == ("failure", "oracle-rejected"), trial
        assert [e["status"] for e in trial["events"]] == ["error", "ok", "ok"]
    assert code in (0, 1, 2), output  # a verdict, not an ERROR


def test_under_a_long_temp_folder_the_boundary_socket_fits_and_one_that_cannot_be_made_is_not_the_agents(
    tmp_path: Path,
) -> None:
    # With a 65-byte TMPDIR the boundary's socket, in the trial's temp folder, passed AF_UNIX's 108 bytes: every
    # trial was agent-crashed ("OSError: AF_UNIX path too long"), the harness's failure charged to the agent.
    long_temp = tmp_path / ("t" * max(1, 65 - len(str(tmp_path)) - 1))
    long_temp.mkdir()
    _code, trials, _store, output = run(tmp_path, descriptor("sdk_careful", "careless"), temp=long_temp)
    assert sorted((t["arm"], t["outcome"], t["failure_mode"]) for t in trials) == [
        ("baseline", "success", None),
        ("candidate", "failure", "oracle-rejected"),
    ], output
    assert list(long_temp.iterdir()) == []
    from certlab_mcp_boundary.arm import McpBoundary

    with pytest.raises(BoundaryBroken) as broken:
        McpBoundary(None, str(long_temp / ("s" * 120))).start()
    assert broken.value.line.startswith("runner-broken: the MCP boundary's socket ")
    assert broken.value.line.endswith("cannot be made: AF_UNIX path too long")


def test_a_request_beyond_tools_is_refused_and_the_trial_is_error(tmp_path: Path) -> None:
    code, trials, _store, output = run(tmp_path, descriptor("nosy", "careful"))
    nosy = arm(trials, "baseline")[0]
    assert (nosy["outcome"], nosy["error"]) == ("error", "mcp-unsupported: prompts/list")
    assert code == 3, output


def test_a_tool_call_while_one_is_in_flight_is_refused() -> None:
    latency = discover(only=["faults"]).get("faults", "latency")
    boundary = counter_boundary([DeclaredFault(0, "latency", latency, "add", (1,), {"seconds": 0.3}, random.Random(1))])
    with pytest.raises(BoundaryBroken, match=r"^mcp-unsupported: concurrent tools/call$"):
        run_here("hasty", boundary)
    assert [e["name"] for e in boundary.events] == ["add"]  # the second call never reached the world


def test_the_tool_call_budget_ends_an_mcp_agent() -> None:
    boundary = counter_boundary(tool_calls=5)
    with pytest.raises(BudgetExceeded):
        run_here("greedy", boundary)
    assert boundary.budget_exceeded == "tool_calls"
    assert boundary.events[-1]["error"]["type"] == "BudgetExceeded"


def test_a_recorded_mcp_trial_replays_with_no_live_world(
    counter_run: tuple[int, list[dict[str, Any]], Path, str], tmp_path: Path
) -> None:
    _code, trials, store, output = counter_run
    assert trials, output
    bundle = tmp_path / "careless.json"
    made = certlab("bundle", str(store), "candidate/add-down-once/0", "--out", str(bundle))
    assert made.returncode == 0, made.stdout + made.stderr
    replayed = certlab("replay", str(bundle))
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "reproduced: failure oracle-rejected" in replayed.stdout


def test_a_python_world_is_served_as_an_mcp_server_with_its_tools_schemas() -> None:
    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    async def session() -> tuple[dict[str, Any], Any, Any]:
        server = StdioServerParameters(
            command=sys.executable,
            args=[
                "-m",
                "certlab_mcp_boundary.world_server",
                "--plugin",
                "certlab_retry_world.plugin",
                "--world",
                "retry-inventory",
                "--input",
                json.dumps({"orders": 2, "existing_share": 0.0}),
                "--seed",
                "3",
            ],
        )
        async with stdio_client(server) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            tools = {t.name: t for t in (await client.list_tools()).tools}
            stock = await client.call_tool("stock", {"sku": "widget"})
            refused = await client.call_tool("confirm", {"order": "no-such-order"})
            return tools, stock, refused

    before = set(threading.enumerate())
    tools, stock, refused = anyio.run(session)
    # The SDK's client learns of the server's exit from a thread of asyncio's (asyncio-waitpid-N), which may still
    # be ending, or waiting on a server slow to die under load, when the session returns. The next test of this
    # worker may fork in this process, which refuses while another thread runs (CI failed so, on a zygote): the
    # server must be gone, and its watcher with it, before this test ends.
    for thread in set(threading.enumerate()) - before:
        thread.join(timeout=30)
    assert [thread.name for thread in set(threading.enumerate()) - before if thread.is_alive()] == []
    assert set(tools) == {"stock", "reserve", "confirm"}
    assert set(tools["reserve"].input_schema["properties"]) == {"order", "sku", "qty"}
    assert not stock.is_error and stock.content
    assert refused.is_error
