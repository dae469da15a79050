"""The report model: what a run store says, per condition and arm, built from the manifest, the trials and the decision.

``build_report`` is a pure function of the manifest, the trial lines and the decision the
gate computes from them (docs/run-store.md). It only counts and summarises: the verdict
and the bounds are the decision's; the per-arm exact (Clopper-Pearson) and Wilson
intervals, at the experiment's alpha, are for reading and never decide anything.
Reporter plugins (``certlab_reporters``) render a ``Report``; ``certlab report --json``
prints it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from attrs import field, frozen

from certlab_core.diagnosis.events import failure_fingerprint
from certlab_core.diagnosis.intervals import clopper_pearson, pass_hat_k, wilson

REPORT_SCHEMA = "certlab.report/1"
DEFAULT_PASS_K: tuple[int, ...] = (1, 2, 4)
ARMS: tuple[str, str] = ("baseline", "candidate")
CLUSTER_EXAMPLES = 3

TRUST_NOTE = (
    "certlab detects a compromised measurement; only a sandbox plugin also contains the agent. "
    "Without one, an agent with shell access can read any file the user can."
)


def _tuple(value: Iterable[Any] | None) -> tuple[Any, ...]:
    return tuple(value or ())


@frozen
class PassK:
    """pass^k: the estimated chance that ``k`` independent trials all succeed (None when k exceeds the trials)."""

    k: int
    value: float | None


@frozen
class ArmSummary:
    """One arm in one condition: its trials (by their last attempt), success rate and intervals for reading.

    ``rate`` is successes over the trials that ended as a success or an agent failure;
    infrastructure ``errors`` are counted apart and never as the agent's failures.
    """

    arm: str
    label: str
    agent: str
    trials: int
    successes: int
    failures: int
    errors: int
    rate: float | None
    exact: tuple[float, float]
    wilson: tuple[float, float]
    pass_k: tuple[PassK, ...] = field(converter=_tuple)
    contract_violations: int = 0


@frozen
class FaultFiring:
    """One declared fault of a condition: in how many trials of each arm it actually altered a call."""

    index: int
    fault: str
    tool: str
    baseline_fired: int
    baseline_trials: int
    candidate_fired: int
    candidate_trials: int

    @property
    def never_fired(self) -> bool:
        return self.baseline_fired == 0 and self.candidate_fired == 0

    @property
    def fired_everywhere(self) -> bool:
        return self.baseline_fired == self.baseline_trials and self.candidate_fired == self.candidate_trials


@frozen
class FailureCluster:
    """Agent failures that share a fingerprint: the failure mode plus the first diverging event."""

    fingerprint: str
    failure_mode: str
    event: str
    baseline: int
    candidate: int
    examples: tuple[str, ...] = field(converter=_tuple)


@frozen
class ConditionReport:
    """One condition: the decision's verdict and bounds, both arms, its faults and its failure clusters."""

    name: str
    bucket: str
    gating: bool
    verdict: str
    look: int | None
    lower: float | None
    upper: float | None
    baseline: ArmSummary
    candidate: ArmSummary
    faults: tuple[FaultFiring, ...] = field(converter=_tuple)
    clusters: tuple[FailureCluster, ...] = field(converter=_tuple)

    @property
    def all_faults_fired(self) -> bool:
        return not any(f.never_fired for f in self.faults)


@frozen
class InfraError:
    """An infrastructure error (not the agent's failure): which attempt, and whether a later attempt replaced it."""

    id: str
    attempt: int
    error: str
    final: bool


@frozen
class ArmUsage:
    """Tokens and estimated cost an arm's agent reported, summed over the trials that reported them."""

    arm: str
    label: str
    trials: int
    trials_reporting: int
    input_tokens: int | None
    output_tokens: int | None
    cost_usd: float | None
    cost_sources: tuple[str, ...] = field(converter=_tuple)


@frozen
class EarlierRun:
    """Another run store of the same experiment beside this one (listed, never decided on)."""

    run: str
    verdict: str | None


@frozen
class Report:
    """Everything ``certlab report`` shows about one run store."""

    schema: str
    experiment: str
    run: str
    verdict: str
    exit_code: int
    rule: str
    alpha: float
    delta: float
    looks: int
    gating_conditions: int
    n_per_arm: int
    pass_k: tuple[int, ...] = field(converter=_tuple)
    conditions: tuple[ConditionReport, ...] = field(converter=_tuple)
    usage: tuple[ArmUsage, ...] = field(converter=_tuple)
    infra_errors: tuple[InfraError, ...] = field(converter=_tuple)
    problems: tuple[str, ...] = field(converter=_tuple)
    reasons: tuple[str, ...] = field(converter=_tuple)
    contract_violations: Mapping[str, int] = field(factory=dict, converter=lambda m: dict(m))
    trials: Mapping[str, int] = field(factory=dict, converter=lambda m: dict(m))
    decision_file: str = "matches"  # matches, missing or differs (the verdict shown is always recomputed)
    earlier_runs: tuple[EarlierRun, ...] = field(converter=_tuple, default=())
    trust_note: str = TRUST_NOTE

    @property
    def all_faults_fired(self) -> bool:
        return all(c.all_faults_fired for c in self.conditions)

    def arm_label(self, arm: str) -> str:
        for usage in self.usage:
            if usage.arm == arm:
                return usage.label
        return arm


# --------------------------------------------------------------------------- building


def latest_attempts(lines: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Each trial id's highest attempt (its outcome)."""
    latest: dict[str, Mapping[str, Any]] = {}
    for line in lines:
        trial_id = line["id"]
        kept = latest.get(trial_id)
        if kept is None or line["attempt"] > kept["attempt"]:
            latest[trial_id] = line
    return latest


def _agent_reference(arm_entry: Mapping[str, Any]) -> str:
    if "agent" in arm_entry:
        return str(arm_entry["agent"])
    return f"adapter {arm_entry.get('adapter')}"


def _arm_summary(
    arm: str, arm_entry: Mapping[str, Any], trials: Sequence[Mapping[str, Any]], alpha: float, ks: Sequence[int]
) -> ArmSummary:
    successes = failures = errors = violations = 0
    for trial in trials:
        outcome = trial.get("outcome")
        if outcome == "success":
            successes += 1
        elif outcome == "failure":
            failures += 1
        else:
            errors += 1
        if trial.get("contract_violations"):
            violations += 1
    decided = successes + failures
    return ArmSummary(
        arm=arm,
        label=str(arm_entry.get("label") or arm),
        agent=_agent_reference(arm_entry),
        trials=len(trials),
        successes=successes,
        failures=failures,
        errors=errors,
        rate=successes / decided if decided else None,
        exact=clopper_pearson(successes, decided, alpha),
        wilson=wilson(successes, decided, alpha),
        pass_k=[PassK(k, pass_hat_k(successes, decided, k)) for k in ks],
        contract_violations=violations,
    )


def _fault_firings(
    condition: Mapping[str, Any], by_arm: Mapping[str, Sequence[Mapping[str, Any]]]
) -> list[FaultFiring]:
    firings = []
    for index, declared in enumerate(condition.get("faults") or ()):
        fired = {}
        for arm in ARMS:
            fired[arm] = sum(
                1
                for trial in by_arm[arm]
                if any(f.get("index") == index and f.get("fired") for f in trial.get("faults") or ())
            )
        firings.append(
            FaultFiring(
                index=index,
                fault=str(declared.get("fault")),
                tool=str(declared.get("tool")),
                baseline_fired=fired["baseline"],
                baseline_trials=len(by_arm["baseline"]),
                candidate_fired=fired["candidate"],
                candidate_trials=len(by_arm["candidate"]),
            )
        )
    return firings


def _clusters(
    condition_name: str,
    by_arm: Mapping[str, Sequence[Mapping[str, Any]]],
    latest: Mapping[str, Mapping[str, Any]],
) -> list[FailureCluster]:
    counts: dict[str, dict[str, Any]] = {}
    for arm in ARMS:
        other = ARMS[1] if arm == ARMS[0] else ARMS[0]
        for trial in by_arm[arm]:
            if trial.get("outcome") != "failure":
                continue
            twin = latest.get(f"{other}/{condition_name}/{trial.get('index')}")
            fingerprint, event = failure_fingerprint(trial, twin)
            entry = counts.setdefault(
                fingerprint,
                {
                    "mode": trial.get("failure_mode") or "unknown",
                    "event": event,
                    "baseline": 0,
                    "candidate": 0,
                    "ids": [],
                },
            )
            entry[arm] += 1
            entry["ids"].append((trial.get("index", 0), str(trial.get("id"))))
    clusters = [
        FailureCluster(
            fingerprint=fingerprint,
            failure_mode=entry["mode"],
            event=entry["event"],
            baseline=entry["baseline"],
            candidate=entry["candidate"],
            examples=[trial_id for _i, trial_id in sorted(entry["ids"])[:CLUSTER_EXAMPLES]],
        )
        for fingerprint, entry in counts.items()
    ]
    clusters.sort(key=lambda c: (-(c.baseline + c.candidate), c.fingerprint))
    return clusters


def _usage(arm: str, arm_entry: Mapping[str, Any], trials: Sequence[Mapping[str, Any]]) -> ArmUsage:
    reporting = 0
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost: float | None = None
    sources: set[str] = set()
    for trial in trials:
        usage = trial.get("usage")
        if not usage:
            continue
        reporting += 1
        if usage.get("input_tokens") is not None:
            tokens_in = (tokens_in or 0) + int(usage["input_tokens"])
        if usage.get("output_tokens") is not None:
            tokens_out = (tokens_out or 0) + int(usage["output_tokens"])
        if usage.get("cost_usd") is not None:
            cost = (cost or 0.0) + float(usage["cost_usd"])
            sources.add(str(usage.get("cost_source") or "unstated"))
    return ArmUsage(
        arm=arm,
        label=str(arm_entry.get("label") or arm),
        trials=len(trials),
        trials_reporting=reporting,
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        cost_usd=cost,
        cost_sources=sorted(sources),
    )


def build_report(
    manifest: Mapping[str, Any],
    lines: Sequence[Mapping[str, Any]],
    decision: Mapping[str, Any],
    *,
    run: str = "",
    pass_k: Sequence[int] = DEFAULT_PASS_K,
    decision_file: str = "matches",
    earlier_runs: Sequence[EarlierRun] = (),
) -> Report:
    """The report of one run store; ``decision`` is the gate's decision over ``manifest`` and ``lines``."""
    rule = manifest["rule"]
    alpha = float(rule["alpha"])
    latest = latest_attempts(lines)
    grouped: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    all_by_arm: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for trial in latest.values():
        grouped[(str(trial.get("condition")), str(trial.get("arm")))].append(trial)
        all_by_arm[str(trial.get("arm"))].append(trial)
    for trials in grouped.values():
        trials.sort(key=lambda t: t.get("index", 0))

    decided = {c["name"]: c for c in decision.get("conditions") or ()}
    conditions = []
    for condition in manifest["conditions"]:
        name = condition["name"]
        by_arm = {arm: grouped.get((name, arm), []) for arm in ARMS}
        verdict_of = decided.get(name) or {}
        bounds = verdict_of.get("bounds") or {}
        conditions.append(
            ConditionReport(
                name=name,
                bucket=str(condition.get("bucket")),
                gating=bool(condition.get("gating")),
                verdict=str(verdict_of.get("verdict") or "ERROR"),
                look=verdict_of.get("look"),
                lower=bounds.get("lower"),
                upper=bounds.get("upper"),
                baseline=_arm_summary("baseline", manifest["arms"]["baseline"], by_arm["baseline"], alpha, pass_k),
                candidate=_arm_summary("candidate", manifest["arms"]["candidate"], by_arm["candidate"], alpha, pass_k),
                faults=_fault_firings(condition, by_arm),
                clusters=_clusters(name, by_arm, latest),
            )
        )

    infra = [
        InfraError(
            id=str(line["id"]),
            attempt=int(line["attempt"]),
            error=str(line.get("error") or ""),
            final=latest.get(line["id"]) is line,
        )
        for line in lines
        if line.get("outcome") == "error"
    ]
    infra.sort(key=lambda e: (e.id, e.attempt))
    return Report(
        schema=REPORT_SCHEMA,
        experiment=str(manifest["experiment"]),
        run=run,
        verdict=str(decision["verdict"]),
        exit_code=int(decision["exit_code"]),
        rule=str(rule["name"]),
        alpha=alpha,
        delta=float(rule["delta"]),
        looks=int(rule.get("looks", 1)),
        gating_conditions=int(
            (decision.get("rule") or {}).get("conditions") or manifest["schedule"]["gating_conditions"]
        ),
        n_per_arm=int(manifest["n_per_arm"]),
        pass_k=pass_k,
        conditions=conditions,
        usage=[_usage(arm, manifest["arms"][arm], all_by_arm.get(arm, [])) for arm in ARMS],
        infra_errors=infra,
        problems=decision.get("problems") or (),
        reasons=decision.get("reasons") or (),
        contract_violations=decision.get("contract_violations") or {},
        trials=decision.get("trials") or {},
        decision_file=decision_file,
        earlier_runs=earlier_runs,
    )
