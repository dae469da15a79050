"""The gate's decision: a pure function of the manifest and trial summaries.

The lines are read and verified by ``certlab_core.gate.summaries`` (each must hold its seal,
name a scheduled trial, carry that trial's identity and the manifest's seal, and number its
attempts); here, the trials present must be exactly those the stopping rule calls for (each
condition stops at its first decisive look; the run stops after a look at which a gating
condition blocked or the candidate broke its contract). Anything else is ERROR, and so is a
trial whose last attempt is an infrastructure error. Otherwise: BLOCK if a gating condition
blocks or the candidate broke its contract, PASS if every gating condition passes, else
INCONCLUSIVE. The statistical rule is the manifest's, from the registry; the arithmetic is the
rule's own (scipy is imported there, when the verdict is computed).

A gating condition whose baseline succeeded in (nearly) none of its trials tested nothing: the
candidate cannot be seen to drop by more than delta from a baseline at or below delta, whatever
the rule then says. Such a condition carries ``untested`` (why, with the failures of both arms)
and a warning; below the minimum baseline success the descriptor declares
(``min_baseline_success``, sealed per condition) it is ERROR, its rule's verdict kept as
``rule_verdict``, and so is the whole decision (exit 3). The rule's bounds and verdicts are
never changed, and a decision without either says exactly what it said before.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from attrs import define, field

from certlab_core.gate.manifest import ARMS, Manifest, SealedCondition
from certlab_core.gate.store import DECISION_SCHEMA
from certlab_core.gate.summaries import Observer, SplitObserver, Trials, TrialSummary, read_summaries, verify_lines
from certlab_core.plugin.errors import EXIT_BLOCK, EXIT_ERROR, EXIT_INCONCLUSIVE, EXIT_PASS
from certlab_core.plugin.types.rule import Bounds, StatisticalRule
from certlab_core.sdk.canonical import sealed
from certlab_core.sdk.deadline import PLUGIN_LOAD_ENV, TooSlow, deadline, plugin_wait_s

EXIT_CODES = {"PASS": EXIT_PASS, "BLOCK": EXIT_BLOCK, "INCONCLUSIVE": EXIT_INCONCLUSIVE, "ERROR": EXIT_ERROR}
PROBLEMS_SHOWN = 20
#: How long the rule's warm-up call may take before it is given up (the real call then has the plugin wait).
WARM_UP_S = 5.0

Decide = Callable[..., Bounds]


@define
class ConditionState:
    """A condition as the stopping rule walks the looks."""

    condition: SealedCondition
    verdict: str | None = None
    look: int | None = None
    looks_run: int = 0
    size: int = 0
    bounds: Bounds | None = None
    counts: dict[str, dict[str, int]] = field(factory=dict)


Groups = dict[tuple[str, str], dict[int, TrialSummary]]
"""Each trial's last attempt by arm and condition, then by index (see :func:`grouped`)."""


def grouped(latest: Mapping[str, TrialSummary]) -> Groups:
    """The trials of ``latest`` by (arm, condition), then by index: one pass, so the looks never build ids."""
    groups: Groups = {}
    for trial_id, line in latest.items():
        arm, condition, index = trial_id.split("/")
        group = groups.get((arm, condition))
        if group is None:
            group = groups[(arm, condition)] = {}
        group[int(index)] = line
    return groups


def _first(groups: Groups, arm: str, condition: str, size: int) -> list[TrialSummary]:
    """The last attempts of trials 0..size-1 of one arm in one condition (those present)."""
    group = groups.get((arm, condition)) or {}
    return [line for index, line in group.items() if index < size]


def _count(groups: Groups, arm: str, condition: str, size: int) -> dict[str, int]:
    counts = {"successes": 0, "failures": 0, "errors": 0, "trials": size}
    for line in _first(groups, arm, condition, size):
        outcome = line.outcome
        counts["successes" if outcome == "success" else "failures" if outcome == "failure" else "errors"] += 1
    return counts


def _violated(line: TrialSummary) -> bool:
    return line.violations > 0


@define
class Walk:
    """The stopping rule walked over the trials present: where each condition stands, and what is still due."""

    states: list[ConditionState]
    required: set[str] = field(factory=set)
    problems: list[str] = field(factory=list)
    reasons: list[str] = field(factory=list)
    due_look: int | None = None  # the look whose trials are missing, if any
    due_conditions: list[str] = field(factory=list)


def walk(
    manifest: Manifest, latest: Mapping[str, TrialSummary], rule: StatisticalRule, groups: Groups | None = None
) -> Walk:
    """Evaluate look after look until a look's trials are missing or every condition has stopped.

    ``groups`` is :func:`grouped` of ``latest``, when the caller has it already.
    """
    if groups is None:
        groups = grouped(latest)
    sizes = manifest.schedule.look_sizes
    looks = len(sizes)
    k = manifest.schedule.gating_conditions
    result = Walk(states=[ConditionState(c) for c in manifest.conditions])
    wait_s = plugin_wait_s()  # how long the rule may take at each look
    active = list(result.states)
    violated = {tid for tid, line in latest.items() if tid.startswith("candidate/") and _violated(line)}
    for look in range(1, looks + 1):
        size = sizes[look - 1]
        present = {
            (arm, s.condition.name): len(_first(groups, arm, s.condition.name, size)) for s in active for arm in ARMS
        }
        if any(count < size for count in present.values()):
            result.due_look = look
            result.due_conditions = [s.condition.name for s in active]
            result.required |= {
                f"{arm}/{s.condition.name}/{i}"
                for s in active
                for arm in ARMS
                for i in range(size)
                if f"{arm}/{s.condition.name}/{i}" in latest
            }
            return result
        result.required |= {f"{arm}/{s.condition.name}/{i}" for s in active for arm in ARMS for i in range(size)}
        for state in active:
            name = state.condition.name
            state.looks_run, state.size = look, size
            state.counts = {arm: _count(groups, arm, name, size) for arm in ARMS}
            base, cand = state.counts["baseline"], state.counts["candidate"]
            try:
                with deadline(wait_s):
                    bounds = rule.decide(
                        base["successes"], size, cand["successes"], size,
                        manifest.rule.alpha, manifest.rule.delta, k, looks,
                    )  # fmt: skip
            except TooSlow:  # a rule that never answers invalidates the decision, as one that raises does
                result.problems.append(
                    f"the rule {rule.name} did not return within {wait_s:g} s ({PLUGIN_LOAD_ENV} sets the wait)"
                )
                return result
            except Exception as error:  # a broken rule invalidates the decision
                result.problems.append(f"the rule {rule.name} raised {type(error).__name__}: {error}")
                return result
            if not isinstance(bounds, Bounds) or bounds.verdict not in ("PASS", "BLOCK", "INCONCLUSIVE"):
                result.problems.append(f"the rule {rule.name} returned {bounds!r}, not Bounds with a verdict")
                return result
            state.bounds = bounds
            if bounds.verdict in ("PASS", "BLOCK") or look == looks:
                state.verdict, state.look = bounds.verdict, look
        violation = any(tid in result.required for tid in violated)
        blocked = any(s.verdict == "BLOCK" and s.condition.gating for s in result.states)
        active = [s for s in active if s.verdict is None]
        if (blocked or violation) and active:
            why = "a gating condition blocked" if blocked else "the candidate broke its contract"
            for state in active:
                state.verdict, state.look = "STOPPED", look
                result.reasons.append(f"{state.condition.name}: stopped at look {look} because {why}")
            active = []
        if not active:
            break
    return result


def decide(
    manifest: Manifest, raw_lines: Iterable[str | bytes], rule: StatisticalRule, observe: Observer | None = None
) -> dict[str, Any]:
    """The decision document (docs/run-store.md) for a manifest and the raw lines of its trials.jsonl.

    ``observe`` (see ``summaries.verify_lines``) lets a caller read the same lines in the same pass.
    """
    return decision_of(manifest, verify_lines(manifest, raw_lines, observe), rule)


def decide_file(
    manifest: Manifest, path: Path, rule: StatisticalRule, observer: SplitObserver | None = None, workers: int = 2
) -> dict[str, Any]:
    """:func:`decide` over the trials.jsonl at ``path``, its lines checked in forked workers (``read_summaries``).

    While the workers finish, the rule is warmed up (:func:`warm_up`).
    """
    return decision_of(
        manifest, read_summaries(manifest, path, observer, workers, meanwhile=lambda: warm_up(rule)), rule
    )


def warm_up(rule: StatisticalRule) -> None:
    """Call the rule once on made-up counts and discard the answer, so that what it imports is loaded.

    A rule is a pure function of counts (``certlab_core.plugin.types.rule.StatisticalRule``); scipy,
    which the exact rules import lazily, takes a third of a second to load. Anything the
    made-up call raises, or a call past ``WARM_UP_S``, is given up here: the real call reports it.
    """
    with contextlib.suppress(Exception, TooSlow), deadline(WARM_UP_S):
        rule.decide(1, 2, 1, 2, 0.05, 0.1, 1, 1)


def decision_of(manifest: Manifest, trials: Trials, rule: StatisticalRule) -> dict[str, Any]:
    """The decision document for the verified summaries of a store's trials (``summaries.read_summaries``)."""
    problems = list(trials.problems)
    latest = trials.latest
    k = manifest.schedule.gating_conditions
    errors = sorted((tid for tid, line in latest.items() if line.outcome == "error"), key=_order_key)
    for trial_id in errors:
        problems.append(f"{trial_id}: {latest[trial_id].error or 'infrastructure error'}")
    walked = Walk(states=[ConditionState(c) for c in manifest.conditions])
    groups = grouped(latest)
    if not problems:
        walked = walk(manifest, latest, rule, groups)
        problems.extend(walked.problems)
        if not problems and walked.due_look is not None:
            missing = sorted(
                (
                    f"{arm}/{name}/{i}"
                    for name in walked.due_conditions
                    for arm in ARMS
                    for i in range(manifest.schedule.look_sizes[walked.due_look - 1])
                    if f"{arm}/{name}/{i}" not in latest
                ),
                key=_order_key,
            )
            problems.append(
                f"{len(missing)} trial(s) the schedule calls for at look {walked.due_look} are missing "
                f"(first: {missing[0]}); the run was interrupted"
            )
        if not problems:
            extra = sorted((tid for tid in latest if tid not in walked.required), key=_order_key)
            if extra:
                problems.append(
                    f"{len(extra)} trial(s) ran past a decisive look (first: {extra[0]}); "
                    "the store does not follow its stopping rule"
                )
    states = walked.states
    reasons = [] if problems else list(walked.reasons)
    for state in states:
        if state.verdict is None:
            state.verdict = "ERROR" if problems else "INCONCLUSIVE"
    conditions = [_condition_document(state, groups, problems) for state in states]
    untested: list[str] = []
    if not problems:
        for state, document in zip(states, conditions, strict=True):
            found = _untested(state, document, manifest.rule.delta)
            if found is None:
                continue
            why, below = found
            document["untested"] = why
            if below:
                document["rule_verdict"], document["verdict"] = document["verdict"], "ERROR"
                state.verdict = "ERROR"
            else:
                untested.append(f"{state.condition.name}: nothing was tested: {why}")
    violations = {arm: sum(1 for (of, _c), group in groups.items() if of == arm for line in group.values()
                           if _violated(line)) for arm in ARMS}  # fmt: skip
    gating = [s for s in states if s.condition.gating]
    if problems or any(s.verdict == "ERROR" for s in gating):
        verdict = "ERROR"
    elif any(s.verdict == "BLOCK" for s in gating) or violations["candidate"]:
        verdict = "BLOCK"
    elif all(s.verdict == "PASS" for s in gating):
        verdict = "PASS"
    else:
        verdict = "INCONCLUSIVE"
    if not problems:
        if violations["candidate"]:
            reasons.append(f"the candidate broke its behaviour contract in {violations['candidate']} trial(s): BLOCK")
        for state, document in zip(states, conditions, strict=True):
            if state.bounds is not None and state.verdict in ("PASS", "BLOCK", "INCONCLUSIVE"):
                reasons.append(_reason(state, manifest.rule.delta))
            elif "rule_verdict" in document:
                reasons.append(
                    f"{state.condition.name} ({state.condition.bucket}): ERROR at look {state.look}: nothing was "
                    f"tested: {document['untested']} (the rule alone said {document['rule_verdict']})"
                )
    shown = problems[:PROBLEMS_SHOWN]
    if len(problems) > PROBLEMS_SHOWN:
        shown.append(f"... and {len(problems) - PROBLEMS_SHOWN} more problem(s)")
    document = {
        "schema": DECISION_SCHEMA,
        "experiment": manifest.experiment,
        "manifest_seal": manifest.seal,
        "verdict": verdict,
        "exit_code": EXIT_CODES[verdict],
        "rule": {
            "name": manifest.rule.name,
            "alpha": manifest.rule.alpha,
            "delta": manifest.rule.delta,
            "looks": manifest.rule.looks,
            "conditions": k,
        },
        "conditions": conditions,
        "contract_violations": violations,
        "trials": {
            "scheduled": len(walked.required) if not problems else 2 * manifest.n_per_arm * len(manifest.conditions),
            "run": len(latest),
            "attempts": trials.attempts,
            "errors": len(errors),
        },
        "problems": shown,
        "reasons": reasons,
        "warnings": [*untested, *_fault_warnings(conditions)],
    }
    return sealed(document)


def _untested(state: ConditionState, document: Mapping[str, Any], delta: float) -> tuple[str, bool] | None:
    """``(why, below the declared minimum)`` when a gating condition's baseline succeeded in too few of its trials
    for the condition to have tested anything: below its ``min_baseline_success``, or at most ``delta``."""
    baseline = state.counts.get("baseline")
    if not state.condition.gating or not state.looks_run or not baseline or not baseline["trials"]:
        return None
    successes, trials = baseline["successes"], baseline["trials"]
    rate = successes / trials
    minimum = getattr(state.condition, "min_baseline_success", None)
    below = minimum is not None and rate < minimum
    if not below and rate > delta:
        return None
    limit = (
        f"below the declared min_baseline_success {minimum:g}"
        if below
        else f"no more than delta {delta:g}, so no drop of more than delta could be seen"
    )
    why = f"the baseline succeeded in {successes} of {trials} trials ({100 * rate:.1f}%), {limit}"
    failures = _failure_text(document["failure_modes"], state.counts)
    return (f"{why}; {failures}" if failures else why), below


def _failure_text(modes: Mapping[str, Mapping[str, int]], counts: Mapping[str, Mapping[str, int]]) -> str:
    """How the arms failed: ``all 240 trials of both arms failed as agent-crashed``, or each arm's commonest modes."""
    every = [(arm, dict(modes[arm])) for arm in ARMS]
    if all(len(arm_modes) == 1 and sum(arm_modes.values()) == counts[arm]["trials"] for arm, arm_modes in every):
        (first,), (second,) = (tuple(arm_modes) for _arm, arm_modes in every)
        if first == second:
            total = sum(counts[arm]["trials"] for arm in ARMS)
            return f"all {total} trials of both arms failed as {first}"
    parts = []
    for arm, arm_modes in every:
        if arm_modes:
            common = sorted(arm_modes.items(), key=lambda item: (-item[1], item[0]))[:3]
            listed = ", ".join(f"{mode} {count}" for mode, count in common)
            parts.append(f"{arm} failures ({sum(arm_modes.values())} of {counts[arm]['trials']}): {listed}")
    return "; ".join(parts)


def _order_key(trial_id: str) -> tuple[int, str, str]:
    arm, condition, index = trial_id.split("/")
    return int(index), condition, arm


def _reason(state: ConditionState, delta: float) -> str:
    bounds = state.bounds
    assert bounds is not None
    head = f"{state.condition.name} ({state.condition.bucket}): {state.verdict} at look {state.look}"
    if state.verdict == "PASS":
        why = f"lower bound {bounds.lower:.4f} > -delta {-delta:.4f}"
    elif state.verdict == "BLOCK":
        why = f"upper bound {bounds.upper:.4f} < -delta {-delta:.4f}"
    else:
        why = f"the bounds [{bounds.lower:.4f}, {bounds.upper:.4f}] contain -delta {-delta:.4f}"
    suffix = "" if state.condition.gating else " (ceiling: reported, never gated)"
    return f"{head}: {why}{suffix}"


def _condition_document(state: ConditionState, groups: Groups, problems: list[str]) -> dict[str, Any]:
    condition = state.condition
    name = condition.name
    size = state.size
    if not size:  # never evaluated: count what is there
        size = max((max(group) + 1 for (_arm, of), group in groups.items() if of == name and group), default=0)
        state.counts = {arm: _count(groups, arm, name, size) for arm in ARMS}
    lines = {arm: _first(groups, arm, name, size) for arm in ARMS}
    fired: list[dict[str, Any]] = []
    for index, declared in enumerate(condition.faults):
        per_arm = {arm: 0 for arm in ARMS}
        for arm in ARMS:
            for line in lines[arm]:
                fired_flags = line.fired
                if index < len(fired_flags) and fired_flags[index] is True:
                    per_arm[arm] += 1
        fired.append(
            {
                "index": index,
                "fault": declared.fault,
                "tool": declared.tool,
                "fired": per_arm,
                "never_fired": size > 0 and not any(per_arm.values()),
            }
        )
    modes: dict[str, dict[str, int]] = {arm: {} for arm in ARMS}
    for arm in ARMS:
        for line in lines[arm]:
            if line.outcome == "failure":
                mode = line.failure_mode or "unknown"
                modes[arm][mode] = modes[arm].get(mode, 0) + 1
        modes[arm] = dict(sorted(modes[arm].items()))
    verdict = "ERROR" if problems else state.verdict
    return {
        "name": condition.name,
        "bucket": condition.bucket,
        "gating": condition.gating,
        "counts": {
            arm: {"successes": state.counts[arm]["successes"], "trials": state.counts[arm]["trials"]} for arm in ARMS
        },
        "bounds": None
        if state.bounds is None or problems
        else {"lower": state.bounds.lower, "upper": state.bounds.upper},
        "verdict": verdict,
        "look": None if problems else state.look,
        "looks_run": state.looks_run,
        "faults": fired,
        "failure_modes": modes,
    }


def _fault_warnings(conditions: Sequence[Mapping[str, Any]]) -> list[str]:
    warnings = []
    for condition in conditions:
        for fault in condition["faults"]:
            if fault["never_fired"]:
                warnings.append(
                    f"{condition['name']}: fault {fault['index']} ({fault['fault']} on {fault['tool']}) never fired; "
                    "this condition did not test what it names"
                )
            elif not all(fault["fired"].values()):
                silent = [arm for arm, n in fault["fired"].items() if not n]
                warnings.append(
                    f"{condition['name']}: fault {fault['index']} ({fault['fault']} on {fault['tool']}) "
                    f"never fired in the {' and '.join(silent)} arm"
                )
    return warnings
