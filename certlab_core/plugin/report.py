"""The report model a reporter renders: per condition and arm, what a run says.

Reporter plugins (``certlab_reporters``) receive a ``Report``; they read it and never
re-run or re-decide anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from attrs import field, frozen

from certlab_core.plugin.types.base import Record
from certlab_core.plugin.types.fields import count_map

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
class PassK(Record):
    """pass^k: the estimated chance that ``k`` independent trials all succeed (None when k exceeds the trials)."""

    k: int
    value: float | None


@frozen
class ArmSummary(Record):
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
    exact: tuple[float, float] | None  # None: no Clopper-Pearson rule was installed to compute it
    wilson: tuple[float, float]
    pass_k: tuple[PassK, ...] = field(converter=_tuple)
    contract_violations: int = 0
    # The upstream errors of the model API its trials met and recovered from (trials that were not ERROR).
    recovered_trials: int = 0
    recovered_errors: int = 0


@frozen
class FaultFiring(Record):
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
class FailureCluster(Record):
    """Agent failures that share a fingerprint: the failure mode plus the first diverging event."""

    fingerprint: str
    failure_mode: str
    event: str
    baseline: int
    candidate: int
    examples: tuple[str, ...] = field(converter=_tuple)


@frozen
class ConditionReport(Record):
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
    # Why nothing was tested, when the baseline succeeded in (nearly) none of this gating condition's trials (the
    # decision's ``untested``): at most delta, or below the descriptor's min_baseline_success. Empty otherwise.
    untested: str = ""
    # What the rule alone said, when the condition is ERROR for its baseline's minimum (empty otherwise).
    rule_verdict: str = ""

    @property
    def all_faults_fired(self) -> bool:
        return not any(f.never_fired for f in self.faults)


@frozen
class InfraError(Record):
    """An infrastructure error (not the agent's failure): which attempt, and whether a later attempt replaced it."""

    id: str
    attempt: int
    error: str
    final: bool


@frozen
class ArmUsage(Record):
    """Tokens and estimated cost an arm's agent reported, summed over the trials that reported them.

    ``Report.cost`` holds the per-trial means with intervals and the candidate-against-baseline
    comparisons (or why none is claimed), from ``certlab_core.report.cost``.
    """

    arm: str
    label: str
    trials: int
    trials_reporting: int
    input_tokens: int | None
    output_tokens: int | None
    cost_usd: float | None
    cost_sources: tuple[str, ...] = field(converter=_tuple)


@frozen
class EarlierRun(Record):
    """Another run store of the same experiment beside this one (listed, never decided on)."""

    run: str
    verdict: str | None


@frozen
class Report(Record):
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
    contract_violations: Mapping[str, int] = field(factory=dict, converter=count_map)
    trials: Mapping[str, int] = field(factory=dict, converter=count_map)
    decision_file: str = "matches"  # matches, missing or differs (the verdict shown is always recomputed)
    earlier_runs: tuple[EarlierRun, ...] = field(converter=_tuple, default=())
    cost: tuple[str, ...] = field(converter=_tuple, default=())
    trust_note: str = TRUST_NOTE
    #: what heads each arm's exact interval: the default rule's ``interval_name`` ("Clopper-Pearson"), else its
    #: name; "" when the interval was handed in unnamed or none was computed
    exact_name: str = ""

    @property
    def all_faults_fired(self) -> bool:
        return all(c.all_faults_fired for c in self.conditions)

    @property
    def untested(self) -> tuple[ConditionReport, ...]:
        """The gating conditions that tested nothing: their baseline succeeded in (nearly) none of their trials."""
        return tuple(c for c in self.conditions if c.untested)

    def arm_label(self, arm: str) -> str:
        for usage in self.usage:
            if usage.arm == arm:
                return usage.label
        return arm
