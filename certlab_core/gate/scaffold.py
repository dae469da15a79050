"""``certlab init``: check references in a child, write a smoke descriptor."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from certlab_core.gate.descriptor import NAME_PATTERN, is_reference, load_descriptor
from certlab_core.gate.references import check_references
from certlab_core.plugin.errors import UsageError
from certlab_core.sdk.safe_io import write_output

TEMPLATE = """\
# A smoke experiment written by 'certlab init'. Every key is shown; 'certlab schema' documents them.
schema: certlab.experiment/1
experiment: {name}
task:
  world: {toolset}          # module:function building the tools: build(task_input, seed) -> WorldInstance
  input: {{}}
oracle: {oracle}            # module:function judging the final state: oracle(task, snapshot) -> OracleVerdict
arms:
  baseline: {{agent: {baseline}, label: baseline}}
  candidate: {{agent: {candidate}, label: candidate}}
conditions:
  - name: clean
    bucket: benign          # must not change the outcome
    faults: []
{fault_condition}rule: {{alpha: 0.05, delta: 0.10, looks: 1}}   # no name: the default rule decides (certlab plugins)
n_per_arm: {n_per_arm}
seed: 0
budgets: {{tool_calls: 200, model_steps: 50, seconds: 30}}
contract: {{max_tool_calls: null, forbidden_tools: [], required_tools: [], max_calls_per_tool: {{}}}}
infra_exit_codes: [75]
"""


def parse_fault(text: str) -> tuple[str, str]:
    """``NAME:TOOL`` (NAME may itself be module:function) as ``(name, tool)``."""
    name, sep, tool = text.rpartition(":")
    if not sep or not name or not tool:
        raise UsageError(f"--fault {text!r} is not NAME:TOOL; write it like tool_timeout:reserve")
    return name, tool


def write_smoke_descriptor(
    name: str,
    baseline: str,
    candidate: str,
    toolset: str,
    oracle: str,
    faults: Sequence[str],
    out: Path,
    n_per_arm: int = 20,
) -> Path:
    """Check every reference (in a child), the fault names and tools, then write and re-read the descriptor."""
    if not NAME_PATTERN.match(name):
        raise UsageError(f"{name!r} is not an experiment id; use letters, digits, '.', '_' and '-'")
    if not 1 <= n_per_arm <= 100_000:
        raise UsageError(f"--n {n_per_arm}: give trials per arm from 1 to 100000")
    for flag, reference in (
        ("--baseline", baseline),
        ("--candidate", candidate),
        ("--toolset", toolset),
        ("--oracle", oracle),
    ):
        if not is_reference(reference):
            raise UsageError(f"{flag} {reference!r} is not module:function; write it like my_agents:agent_a")
    if out.exists():
        raise UsageError(f"{out} exists; choose another file with --out or remove it")
    declared = [parse_fault(text) for text in faults]
    folder = str(out.resolve().parent)
    references = [baseline, candidate, toolset, oracle] + [f for f, _t in declared if is_reference(f)]
    checks = check_references(references, folder, toolset, {})
    for flag, reference in (
        ("--baseline", baseline),
        ("--candidate", candidate),
        ("--toolset", toolset),
        ("--oracle", oracle),
    ):
        error = checks[reference].error
        if error is not None:
            raise UsageError(f"{flag} {reference} {error}; it must import from {folder} or the environment")
    tools = checks[toolset].tools
    from certlab_core._runtime.registry import discover

    registry = discover()
    for fault, tool in declared:
        if is_reference(fault):
            if checks[fault].error is not None:
                raise UsageError(f"--fault {fault}:{tool}: {fault} {checks[fault].error}")
        else:
            registry.get("faults", fault)
        if tool not in tools and not (tool == "decide" and checks[toolset].decisions):
            raise UsageError(f"--fault {fault}:{tool}: the toolset has no tool {tool!r}; its tools: {', '.join(tools)}")
    fault_condition = ""
    if declared:
        lines = ["  - name: faults", "    bucket: falsify         # a robust agent should survive these", "    faults:"]
        lines += [f"      - {{fault: {fault}, tool: {tool}, on_calls: [1], params: {{}}}}" for fault, tool in declared]
        fault_condition = "\n".join(lines) + "\n"
    text = TEMPLATE.format(
        name=name,
        toolset=toolset,
        oracle=oracle,
        baseline=baseline,
        candidate=candidate,
        fault_condition=fault_condition,
        n_per_arm=n_per_arm,
    )
    write_output(out, text, "the descriptor")
    load_descriptor(out)  # what was written must read back
    return out
