"""The report model: what a run store says, per condition and arm.

``build_report`` is a pure function of the manifest, the trial lines and the decision the
gate computes from them (docs/run-store.md). It only counts and summarises: the verdict
and the bounds are the decision's; the per-arm exact (the default rule's) and Wilson
intervals, at the experiment's alpha, are for reading and never decide anything. The
exact one is the installed default rule's ``interval`` (Clopper-Pearson's), handed in with
its name: the kernel has no second implementation of it (none installed: none is shown).
Reporter plugins (``certlab_reporters``) render a ``Report``; ``certlab report --json``
prints it.
"""

from __future__ import annotations

import heapq
import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeAlias

import attrs
from attrs import define

from certlab_core.gate.events import boundary_marks, fingerprint_of_marks
from certlab_core.gate.summaries import OUTCOMES
from certlab_core.plugin.report import (
    ARMS,
    CLUSTER_EXAMPLES,
    DEFAULT_PASS_K,
    REPORT_SCHEMA,
    ArmSummary,
    ArmUsage,
    ConditionReport,
    EarlierRun,
    FailureCluster,
    FaultFiring,
    InfraError,
    PassK,
    Report,
)
from certlab_core.plugin.types.agent import Usage
from certlab_core.plugin.types.rule import Interval
from certlab_core.report.cost import cost_report
from certlab_core.report.line_reading import (
    NO_USAGE,
    NO_USAGE_BYTES,
    UNREAD,
    last_usage,
    raw_marks,
    usage_of,
    usage_record,
    well_formed,
)
from certlab_core.sdk.wilson import wilson


def pass_hat_k(successes: int, n: int, k: int) -> float | None:
    """pass^k: the unbiased estimate that ``k`` independent trials all succeed, C(s, k) / C(n, k); None if k > n."""
    if k < 1 or k > n:
        return None
    return math.comb(successes, k) / math.comb(n, k)


def _tuple(value: Iterable[Any] | None) -> tuple[Any, ...]:
    return tuple(value or ())


# --------------------------------------------------------------------------- building


@define
class TrialSummary:
    """What the report keeps of one trial attempt once its line has been read (never its events)."""

    id: str
    arm: str
    condition: str
    index: int
    attempt: int
    outcome: str
    failure_mode: str | None
    fired: frozenset[int]
    violated: bool
    usage: Usage | None
    fingerprint: tuple[str, str] | None = None
    upstream_errors: int = 0  # errors of the real model upstream the run met


_USAGE_FIELDS = tuple(a.name for a in attrs.fields(Usage))  # a Usage sent between processes as a tuple


_Pending: TypeAlias = tuple[TrialSummary, str | bytes] | Mapping[str, Any]
"""A line waiting for its twin: a sealed line's trial summary with its raw text, or a line parsed whole."""


class _Marked:
    """What a failure's fingerprint needs of a line: its id, attempt, outcome, failure mode and boundary marks."""

    __slots__ = ("attempt", "failure_mode", "id", "marks", "outcome")

    def __init__(self, trial_id: Any, attempt: Any, outcome: Any, failure_mode: Any, marks: Sequence[str]) -> None:
        self.id, self.attempt, self.outcome, self.failure_mode = trial_id, attempt, outcome, failure_mode
        self.marks = marks

    @classmethod
    def of(cls, line: _Pending) -> _Marked:
        if isinstance(line, tuple):
            trial, raw = line
            return cls(trial.id, trial.attempt, trial.outcome, trial.failure_mode, raw_marks(raw))
        return cls(
            line.get("id"),
            line.get("attempt"),
            line.get("outcome"),
            line.get("failure_mode"),
            boundary_marks(line.get("events") or []),
        )


def _outcome(line: _Pending) -> Any:
    return line[0].outcome if isinstance(line, tuple) else line.get("outcome")


class ReportAccumulator:
    """Reads trial lines one at a time (in any order) and keeps only what the report needs.

    Each line is reduced to a ``TrialSummary`` as it is read. A failed trial's fingerprint
    needs its twin's boundary marks (the other arm, same condition and index), so a line's
    raw text is also held until its twin arrives (the schedule interleaves the arms, so that
    is soon) and its marks are decoded only if the pair holds a failure. Memory stays
    proportional to the number of trials, not to the size of their recordings.
    """

    def __init__(
        self, manifest: Mapping[str, Any], pass_k: Sequence[int] = DEFAULT_PASS_K, exact: Interval | None = None
    ) -> None:
        self.manifest = manifest
        self.pass_k = tuple(pass_k)
        self.exact = exact
        self.latest: dict[str, TrialSummary] = {}
        self.errors: list[tuple[str, int, str]] = []
        self._pending: dict[tuple[str, int], dict[str, _Pending]] = {}
        self._names: dict[str, str] = {}
        self._patterns: dict[tuple[Any, ...], frozenset[int]] = {}
        self.skipped = 0

    def _interned(self, text: Any) -> str:
        value = str(text)
        return self._names.setdefault(value, value)

    def add(self, line: Mapping[str, Any]) -> None:
        """Take one trial line (any attempt); a line not shaped like a trial record is left out.

        Such a line never counts: the gate's decision over the same lines is ERROR and says why.
        """
        if not well_formed(line):
            self.skipped += 1
            return
        trial_id = str(line.get("id"))
        attempt = int(line.get("attempt") or 0)
        outcome = self._interned(line.get("outcome"))
        summary = TrialSummary(
            id=trial_id,
            arm=self._interned(line.get("arm")),
            condition=self._interned(line.get("condition")),
            index=int(line.get("index") or 0),
            attempt=attempt,
            outcome=outcome,
            failure_mode=None if line.get("failure_mode") is None else self._interned(line.get("failure_mode")),
            fired=frozenset(
                int(f["index"]) for f in line.get("faults") or () if f.get("fired") and isinstance(f.get("index"), int)
            ),
            violated=bool(line.get("contract_violations")),
            usage=usage_of(line),
            upstream_errors=_upstream_count(line.get("upstream_errors")),
        )
        if outcome == "error":
            self.errors.append((trial_id, attempt, str(line.get("error") or "")))
        kept = self.latest.get(trial_id)
        if kept is not None and kept.attempt > attempt:
            return
        self.latest[trial_id] = summary
        if outcome == "error":
            return
        pair = self._pending.setdefault((summary.condition, summary.index), {})
        pair[summary.arm] = line
        if len(pair) == len(ARMS):
            self._fingerprint_pair(pair)
            del self._pending[(summary.condition, summary.index)]

    def observe(self, _number: int, raw: str | bytes, summary: Mapping[str, Any] | None) -> None:
        """Take one line as the gate's decision reads it (an observer of ``decide``): raw, with its verified summary.

        A line whose seal held is read from its ``_gate`` summary and its last key, ``usage``;
        a failure's fingerprint comes from the boundary marks (``_marks``) of its pair (the
        twin of the other arm), read only when the pair holds a failure. Any other line is
        parsed whole and taken as by :meth:`add`.
        """
        trial = None if summary is None else self._from_summary(raw, summary)
        if trial is None or summary is None:
            try:
                line = json.loads(raw)
            except (ValueError, RecursionError):
                return
            if isinstance(line, dict):
                self.add(line)
            return
        if trial.outcome == "error":
            self.errors.append((trial.id, trial.attempt, str(summary.get("error") or "")))
        kept = self.latest.get(trial.id)
        if kept is not None and kept.attempt > trial.attempt:
            return
        self.latest[trial.id] = trial
        if trial.outcome == "error":
            return
        key = (trial.condition, trial.index)
        pair = self._pending.get(key)
        if pair is None:
            self._pending[key] = {trial.arm: (trial, raw)}
            return
        pair[trial.arm] = (trial, raw)
        if len(pair) == len(ARMS):
            del self._pending[key]
            self._fingerprint_pair(pair)

    def _fired(self, flags: Any) -> frozenset[int]:
        """The indices of the faults that fired, one shared set per pattern of flags."""
        if not isinstance(flags, list):
            return frozenset()
        try:
            return self._patterns[tuple(flags)]
        except KeyError:
            fired = self._patterns[tuple(flags)] = frozenset(i for i, flag in enumerate(flags) if flag)
            return fired
        except TypeError:  # an unhashable flag (the decision reports the store as damaged)
            return frozenset(i for i, flag in enumerate(flags) if flag)

    def fresh(self) -> ReportAccumulator:
        """An empty accumulator for the same manifest, to read a part of the lines elsewhere (a forked worker)."""
        return ReportAccumulator(self.manifest, self.pass_k, self.exact)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # Sent back from a forked worker: each kept trial as a plain tuple, which pickles far faster than a record.
        rows = [
            (t.id, t.arm, t.condition, t.index, t.attempt, t.outcome, t.failure_mode, t.fired, t.violated,
             None if t.usage is None else tuple(getattr(t.usage, name) for name in _USAGE_FIELDS), t.fingerprint,
             t.upstream_errors)
            for t in self.latest.values()
        ]  # fmt: skip
        return _restored, (self.manifest, self.pass_k, self.exact, rows, self.errors, self._pending, self.skipped)

    def absorb(self, other: ReportAccumulator) -> None:
        """Take what an accumulator that read the lines after those read here has kept.

        Later attempts replace earlier ones as in one pass; a pair whose twins were read on
        either side of the split is completed here and its failures fingerprinted.
        """
        self.skipped += other.skipped
        self.errors.extend(other.errors)
        for trial_id, trial in other.latest.items():
            kept = self.latest.get(trial_id)
            if kept is None or kept.attempt <= trial.attempt:
                self.latest[trial_id] = trial
        for key, lines in other._pending.items():
            pair = self._pending.setdefault(key, {})
            pair.update(lines)
            if len(pair) == len(ARMS):
                self._fingerprint_pair(pair)
                del self._pending[key]

    def _from_summary(self, raw: str | bytes, summary: Mapping[str, Any]) -> TrialSummary | None:
        """The trial summary of a sealed line from its ``_gate`` summary and its ``usage`` (None: read it whole).

        Called once per line of a store, so it is written for speed: the id is cut with
        ``partition`` and repeated strings are shared through one dictionary.
        """
        trial_id, attempt, outcome = summary.get("id"), summary.get("attempt"), summary.get("outcome")
        if type(trial_id) is not str or type(attempt) is not int or outcome not in OUTCOMES:
            return None
        arm, _slash, rest = trial_id.partition("/")
        condition, _slash, index = rest.partition("/")
        if arm not in ARMS or not (index.isascii() and index.isdigit()):
            return None
        if raw.endswith(NO_USAGE_BYTES) if isinstance(raw, bytes) else raw.endswith(NO_USAGE):
            usage = None
        else:
            reported = last_usage(raw)
            if reported is UNREAD:
                return None
            usage = usage_record(reported)
        names = self._names
        mode = summary.get("failure_mode")
        return TrialSummary(
            trial_id,
            names.setdefault(arm, arm),
            names.setdefault(condition, condition),
            int(index),
            attempt,
            names.setdefault(outcome, outcome),
            None if mode is None else self._interned(mode),
            self._fired(summary.get("fired")),
            bool(summary.get("violations")),
            usage,
            upstream_errors=_upstream_count(summary.get("upstream_errors")),
        )

    def _fingerprint_pair(self, pair: Mapping[str, _Pending]) -> None:
        if not any(_outcome(line) == "failure" for line in pair.values()):
            return
        lines = {arm: _Marked.of(line) for arm, line in pair.items()}
        for arm, line in lines.items():
            if line.outcome != "failure":
                continue
            twin = lines.get(ARMS[1] if arm == ARMS[0] else ARMS[0])
            summary = self.latest.get(str(line.id))
            if summary is not None and summary.attempt == line.attempt:
                passing = twin.marks if twin is not None and twin.outcome == "success" else None
                summary.fingerprint = fingerprint_of_marks(line.failure_mode, line.marks, passing)

    def _finish_pending(self) -> None:
        for pair in self._pending.values():
            self._fingerprint_pair(pair)
        self._pending.clear()

    # ------------------------------------------------------------------ the report

    def _arm_summary(self, arm: str, trials: Sequence[TrialSummary], alpha: float) -> ArmSummary:
        arm_entry = self.manifest["arms"][arm]
        successes = sum(1 for t in trials if t.outcome == "success")
        failures = sum(1 for t in trials if t.outcome == "failure")
        decided = successes + failures
        return ArmSummary(
            arm=arm,
            label=str(arm_entry.get("label") or arm),
            agent=_agent_reference(arm_entry),
            trials=len(trials),
            successes=successes,
            failures=failures,
            errors=len(trials) - decided,
            rate=successes / decided if decided else None,
            exact=None if self.exact is None else self.exact(successes, decided, alpha),
            wilson=wilson(successes, decided, alpha),
            pass_k=[PassK(k, pass_hat_k(successes, decided, k)) for k in self.pass_k],
            contract_violations=sum(1 for t in trials if t.violated),
            recovered_trials=sum(1 for t in trials if t.upstream_errors and t.outcome != "error"),
            recovered_errors=sum(t.upstream_errors for t in trials if t.outcome != "error"),
        )

    def _fault_firings(
        self, condition: Mapping[str, Any], by_arm: Mapping[str, Sequence[TrialSummary]]
    ) -> list[FaultFiring]:
        return [
            FaultFiring(
                index=index,
                fault=str(declared.get("fault")),
                tool=str(declared.get("tool")),
                baseline_fired=sum(1 for t in by_arm["baseline"] if index in t.fired),
                baseline_trials=len(by_arm["baseline"]),
                candidate_fired=sum(1 for t in by_arm["candidate"] if index in t.fired),
                candidate_trials=len(by_arm["candidate"]),
            )
            for index, declared in enumerate(condition.get("faults") or ())
        ]

    @staticmethod
    def _clusters(by_arm: Mapping[str, Sequence[TrialSummary]]) -> list[FailureCluster]:
        counts: dict[str, dict[str, Any]] = {}
        for arm in ARMS:
            for trial in by_arm[arm]:
                if trial.outcome != "failure":
                    continue
                fingerprint, event = trial.fingerprint or (f"{trial.failure_mode or 'unknown'} @ ?", "?")
                entry = counts.setdefault(
                    fingerprint,
                    {"mode": trial.failure_mode or "unknown", "event": event, "baseline": 0, "candidate": 0, "ids": []},
                )
                entry[arm] += 1
                entry["ids"].append((trial.index, trial.id))
        clusters = [
            FailureCluster(
                fingerprint=fingerprint,
                failure_mode=entry["mode"],
                event=entry["event"],
                baseline=entry["baseline"],
                candidate=entry["candidate"],
                examples=[trial_id for _i, trial_id in heapq.nsmallest(CLUSTER_EXAMPLES, entry["ids"])],
            )
            for fingerprint, entry in counts.items()
        ]
        clusters.sort(key=lambda c: (-(c.baseline + c.candidate), c.fingerprint))
        return clusters

    def _usage(self, arm: str, trials: Sequence[TrialSummary]) -> ArmUsage:
        arm_entry = self.manifest["arms"][arm]
        reported = [t.usage for t in trials if t.usage is not None]
        tokens_in = [u.input_tokens for u in reported if u.input_tokens is not None]
        tokens_out = [u.output_tokens for u in reported if u.output_tokens is not None]
        costs = [u.cost_usd for u in reported if u.cost_usd is not None]
        return ArmUsage(
            arm=arm,
            label=str(arm_entry.get("label") or arm),
            trials=len(trials),
            trials_reporting=len(reported),
            input_tokens=sum(int(v) for v in tokens_in) if tokens_in else None,
            output_tokens=sum(int(v) for v in tokens_out) if tokens_out else None,
            cost_usd=sum(costs) if costs else None,
            cost_sources=sorted({u.cost_source or "unstated" for u in reported if u.cost_usd is not None}),
        )

    def report(
        self,
        decision: Mapping[str, Any],
        *,
        run: str = "",
        decision_file: str = "matches",
        earlier_runs: Sequence[EarlierRun] = (),
    ) -> Report:
        """The report, given the gate's decision over the same manifest and lines."""
        self._finish_pending()
        manifest = self.manifest
        rule = manifest["rule"]
        alpha = float(rule["alpha"])
        grouped: dict[tuple[str, str], list[TrialSummary]] = defaultdict(list)
        all_by_arm: dict[str, list[TrialSummary]] = defaultdict(list)
        for trial in self.latest.values():
            grouped[(trial.condition, trial.arm)].append(trial)
            all_by_arm[trial.arm].append(trial)
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
                    baseline=self._arm_summary("baseline", by_arm["baseline"], alpha),
                    candidate=self._arm_summary("candidate", by_arm["candidate"], alpha),
                    faults=self._fault_firings(condition, by_arm),
                    clusters=self._clusters(by_arm),
                    untested=str(verdict_of.get("untested") or ""),
                    rule_verdict=str(verdict_of.get("rule_verdict") or ""),
                )
            )
        infra = [
            InfraError(id=trial_id, attempt=attempt, error=error, final=self.latest[trial_id].attempt == attempt)
            for trial_id, attempt, error in sorted(self.errors)
        ]
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
            pass_k=self.pass_k,
            conditions=conditions,
            usage=[self._usage(arm, all_by_arm.get(arm, [])) for arm in ARMS],
            cost=cost_report({arm: [t.usage for t in all_by_arm.get(arm, [])] for arm in ARMS}, alpha=alpha).lines(),
            infra_errors=infra,
            problems=decision.get("problems") or (),
            reasons=decision.get("reasons") or (),
            contract_violations=decision.get("contract_violations") or {},
            trials=decision.get("trials") or {},
            decision_file=decision_file,
            earlier_runs=earlier_runs,
            # a GuardedInterval (the harness's) names its rule's interval; a bare function names nothing
            exact_name=str(getattr(self.exact, "name", "") or "") if self.exact is not None else "",
        )


def _restored(
    manifest: Mapping[str, Any],
    pass_k: Sequence[int],
    exact: Interval | None,
    rows: Sequence[tuple[Any, ...]],
    errors: list[tuple[str, int, str]],
    pending: dict[tuple[str, int], dict[str, _Pending]],
    skipped: int,
) -> ReportAccumulator:
    """A report accumulator from what ``ReportAccumulator.__reduce__`` sent."""
    accumulator = ReportAccumulator(manifest, pass_k, exact)
    latest = accumulator.latest
    for row in rows:
        trial = latest[row[0]] = TrialSummary(*row)
        if row[9] is not None:
            trial.usage = Usage(*row[9])
    accumulator.errors, accumulator._pending, accumulator.skipped = errors, pending, skipped
    return accumulator


def _upstream_count(value: Any) -> int:
    """How many upstream errors a line's ``upstream_errors`` (a list) or its summary's (a count) says; 0 otherwise."""
    if isinstance(value, list):
        return len(value)
    return value if type(value) is int and value > 0 else 0


def _agent_reference(arm_entry: Mapping[str, Any]) -> str:
    if arm_entry.get("agent"):
        return str(arm_entry["agent"])
    version = arm_entry.get("agent_version")
    return f"adapter {arm_entry.get('adapter')}" + (f" ({version}, as its program reports)" if version else "")


def build_report(
    manifest: Mapping[str, Any],
    lines: Iterable[Mapping[str, Any]],
    decision: Mapping[str, Any],
    *,
    run: str = "",
    pass_k: Sequence[int] = DEFAULT_PASS_K,
    decision_file: str = "matches",
    earlier_runs: Sequence[EarlierRun] = (),
    exact: Interval | None = None,
) -> Report:
    """The report of one run store; ``decision`` is the gate's decision over ``manifest`` and ``lines``.

    ``exact`` gives each arm's exact interval (the Clopper-Pearson rule's ``interval``); None: none is shown.
    """
    accumulator = ReportAccumulator(manifest, pass_k, exact)
    for line in lines:
        accumulator.add(line)
    return accumulator.report(decision, run=run, decision_file=decision_file, earlier_runs=earlier_runs)
