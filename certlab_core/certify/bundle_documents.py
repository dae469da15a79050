"""The bundle's documents: harness, families, graders, trials, usage, proofs."""

from __future__ import annotations

import importlib.metadata
import platform
import subprocess
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from certlab_core._runtime.registry import Registry
from certlab_core.certify.lab import (
    SeededProof,
    TrialRecord,
)
from certlab_core.certify.twins import TwinProof, honesty_summary
from certlab_core.plugin.types.family import TaskFamily
from certlab_core.sdk.canonical import unstructure
from certlab_core.sdk.grading import grader_chain
from certlab_core.sdk.workcopy import sha256_file, taskset_sha256


def harness_commit() -> str:
    """The git commit of the certlab checkout that ran, or ``unknown`` outside a checkout."""
    source = Path(__file__).resolve().parent.parent
    if not (source / ".git").exists():
        return "unknown"
    try:
        out = subprocess.run(
            ["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"


def environment_facts() -> dict[str, Any]:
    """Python, platform and installed distributions; never environment variables."""
    installed: dict[str, str] = {}
    for distribution in importlib.metadata.distributions():
        metadata = distribution.metadata  # parsed once: ``.version`` would parse the whole file again
        installed[(metadata["Name"] or "?").lower()] = metadata["Version"]
    dists = sorted(installed.items())
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "distributions": dict(dists),
    }


def family_facts(registry: Registry, family: TaskFamily) -> dict[str, Any]:
    plugin = registry.plugin_of("task_families", family.name)
    return {
        "name": family.name,
        "version": family.version,
        "distribution": plugin.distribution,
        "distribution_version": plugin.version,
        "taskset_sha256": taskset_sha256(family),
        "prompt_sha256": sha256_file(Path(family.prompt_file)),
        "tasks": [d.id for d in family.defects],
    }


def grader_facts(registry: Registry) -> list[dict[str, Any]]:
    facts = []
    for grader in grader_chain(registry):
        plugin = registry.plugin_of("graders", grader.name)
        facts.append(
            {"name": grader.name, "order": grader.order, "distribution": plugin.distribution, "version": plugin.version}
        )
    return facts


def trial_document(record: TrialRecord) -> dict[str, Any]:
    """A trial as the bundle holds it; ``twin`` only on an impossible twin's trial, so a seeded one reads as before."""
    document: dict[str, Any] = unstructure(record)
    if document.get("twin") is None:
        document.pop("twin", None)
    return document


def agent_details(trials: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The adapter's own one-line accounts (``AgentOutcome.detail``), each with the trials that gave it."""
    by_detail: dict[str, list[str]] = {}
    for trial in trials:
        detail = trial.get("agent_detail") or ""
        if detail:
            by_detail.setdefault(detail, []).append(str(trial["id"]))
    return [{"detail": detail, "trials": ids} for detail, ids in sorted(by_detail.items())]


def summary_of(trials: Sequence[dict[str, Any]]) -> dict[str, int]:
    return {
        "scheduled": len(trials),
        "fixed": sum(1 for t in trials if t["verdict"] == "fixed"),
        "graded": sum(1 for t in trials if t["grades"]),
        "unavailable": sum(1 for t in trials if t["verdict"] == "unavailable"),
    }


USAGE_QUANTITIES = ("input_tokens", "cached_input_tokens", "output_tokens", "cost_usd")


DOLLAR_NOTE = "the client's own estimate, from its own price table, not a bill"


def usage_document(trials: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What the agent's trials reported of their own consumption, summed per report shape (never across shapes).

    Each quantity's total is over the trials whose report carries it, and says how many those are.
    """
    by_shape: dict[str, list[dict[str, Any]]] = {}
    for trial in trials:
        usage = trial.get("usage")
        if isinstance(usage, dict):
            by_shape.setdefault(str(usage.get("shape")), []).append(usage)
    shapes = []
    for shape, reports in sorted(by_shape.items()):
        entry: dict[str, Any] = {"shape": shape, "reported": len(reports)}
        for quantity in USAGE_QUANTITIES:
            values = [r[quantity] for r in reports if isinstance(r.get(quantity), int | float)]
            entry[quantity] = {"total": (round(sum(values), 10) if values else None), "trials": len(values)}
        entry["cost_sources"] = sorted({str(r["cost_source"]) for r in reports if r.get("cost_source")})
        shapes.append(entry)
    return {
        "trials": len(trials),
        "reported": sum(s["reported"] for s in shapes),
        "shapes": shapes,
        "note": DOLLAR_NOTE,
    }


def proof_document(proof: SeededProof) -> dict[str, Any]:
    return {
        "family": proof.family,
        "holds": proof.holds,
        "clean_passed": proof.clean_passed,
        "expected_tests": list(proof.expected_tests),
        "seeded": [dict(s) for s in proof.seeded],
        "problems": list(proof.problems),
    }


def rule_interval(registry: Registry) -> tuple[str | None, Any]:
    """The default rule's name and exact interval (Clopper-Pearson's), the one the contract's rates use; (None,
    None) when no installed rule marks itself the default (two that do are refused in one line)."""
    from certlab_core._runtime.default_rule import default_rule, default_rules, guarded_interval

    if not default_rules(registry):
        return None, None
    rule = default_rule(registry, "the impossible twins' rates need the default statistical rule's exact interval")
    return rule.name, guarded_interval(registry, rule)


def impossible_document(
    registry: Registry,
    kinds: Sequence[str],
    proofs: Sequence[TwinProof],
    families: Sequence[TaskFamily],
    trials: Sequence[dict[str, Any]],
    calibration_problems: Sequence[str],
    reused: Collection[str] = (),
) -> dict[str, Any]:
    """The bundle's ``impossible`` section: each twin with its own hash and proof, its trials, and the rates.

    A twin whose proof was measured earlier and reused (its family is in ``reused``) says so: ``"reused": true``.
    """
    from certlab_core.certify.contract import CONTRACT_ALPHA

    by_name = {f.name: f for f in families}
    rule, interval = rule_interval(registry)
    return {
        "kinds": list(kinds),
        "twins": [
            {**p.document(by_name[p.family]), **({"reused": True} if p.family in reused else {})} for p in proofs
        ],
        "trials": list(trials),
        "summary": honesty_summary(trials, interval, CONTRACT_ALPHA, rule),
        "calibration_problems": list(calibration_problems),
    }
