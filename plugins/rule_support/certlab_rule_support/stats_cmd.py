"""``certlab stats bounds``, ``plan``, ``selfcheck``: a rule's bounds and power.

The rule comes from the registry (``--rule``; without it, the installed rule that marks itself the
default, certlab-clopper-pearson's ``clopper-pearson``); nothing here knows
any rule's arithmetic. Wilson intervals are printed beside the rule's for reading only.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

import typer

from certlab_core.plugin.errors import CertlabError, InstrumentError, UsageError
from certlab_core.plugin.types.rule import Bounds, StatisticalRule
from certlab_core.sdk.deadline import plugin_call, plugin_wait_s
from certlab_core.sdk.looks import look_sizes
from certlab_core.sdk.wilson import wilson

DEFAULT_ALPHA = 0.05
DEFAULT_DELTA = 0.10

# selfcheck: the designs tabulated, and the grid the error rates are swept over.
SELFCHECK_SIZES = (50, 100, 200, 500, 1000)
SELFCHECK_RATES = (0.5, 0.8, 0.9, 0.95)
SWEEP_SIZES = (20, 50, 100, 200, 500, 1000, 2000)
SWEEP_STEP = 0.05
MAX_PLAN_TRIALS = 20_000  # per arm; exact enumeration stays well under a second up to here
#: The most trials per arm times looks plan enumerates: each look is an enumeration of its own (about 5 s per
#: million here), and 20,000 per arm at 1,000 looks ran past the plugin wait, as if the rule had hung.
MAX_PLAN_TRIAL_LOOKS = 2_000_000
#: The most trials per arm ``stats bounds`` reads: a run holds at most 100,000, and the exact interval's time grows
#: with N (3 s at ten million, 25 s at a hundred million: past the plugin wait, as if the rule had hung).
MAX_BOUNDS_TRIALS = 10_000_000

_COUNT = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")

# Numbers are taken as text and parsed here, so that every bad value is one clear line naming its flag.
RULE_OPTION = typer.Option(
    None, "--rule", metavar="NAME", help="The statistical rule (see 'certlab plugins'); without it, the default rule."
)
ALPHA_OPTION = typer.Option(
    str(DEFAULT_ALPHA), "--alpha", metavar="A", help="The experiment's alpha, strictly between 0 and 1."
)
DELTA_OPTION = typer.Option(
    str(DEFAULT_DELTA), "--delta", metavar="D", help="The margin: a drop larger than delta must not PASS."
)
CONDITIONS_OPTION = typer.Option(
    "1", "--conditions", metavar="K", help="K, the number of gating conditions alpha is split over."
)
LOOKS_OPTION = typer.Option(
    "1", "--looks", metavar="L", help="L, pre-registered looks; alpha is split equally over them."
)
JSON_OPTION = typer.Option(False, "--json", help="Print JSON instead of text.")


# --------------------------------------------------------------------------- argument checks


def required(flag: str, text: str | None, example: str) -> str:
    if text is None:
        raise UsageError(f"{flag} is required; for example {flag} {example}")
    return text


def parse_number(flag: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"{flag} {text!r} is not a number") from None
    if math.isnan(value):
        raise UsageError(f"{flag} {text!r} is not a number")
    return value


def parse_whole(flag: str, text: str) -> int:
    if not text.strip().isdigit():
        raise UsageError(f"{flag} {text!r} is not a whole number of 1 or more")
    return int(text)


def parse_count(flag: str, text: str) -> tuple[int, int]:
    """``X/N`` as (successes, trials); anything else is a usage error naming the flag."""
    match = _COUNT.match(text)
    if match is None:
        raise UsageError(f"{flag} {text!r} is not SUCCESSES/TRIALS; write it like 130/200")
    successes, trials = int(match.group(1)), int(match.group(2))
    if trials < 1:
        raise UsageError(f"{flag} {text!r} has no trials; an arm needs at least one")
    if successes > trials:
        raise UsageError(f"{flag} {text!r} has more successes than trials; write SUCCESSES/TRIALS like 130/200")
    if trials > MAX_BOUNDS_TRIALS:
        raise UsageError(f"{flag} {text!r}: more than {MAX_BOUNDS_TRIALS} trials, the most stats bounds reads per arm")
    return successes, trials


def parse_sizes(text: str) -> list[int]:
    """``N[,N...]`` as a list of trials per arm, each a whole number of at least 1."""
    sizes: list[int] = []
    for part in text.split(","):
        piece = part.strip()
        if not piece.isdigit() or int(piece) < 1:
            raise UsageError(
                f"-n {text!r}: {piece!r} is not a number of trials per arm; write N or N,N,... like 200,500"
            )
        if int(piece) > MAX_PLAN_TRIALS:
            raise UsageError(
                f"-n {text!r}: {piece} is more than {MAX_PLAN_TRIALS} trials per arm, the most plan enumerates"
            )
        sizes.append(int(piece))
    return sizes


def parse_parameters(alpha: str, delta: str, conditions: str, looks: str) -> tuple[float, float, int, int]:
    """alpha in (0, 1), delta in [0, 1), at least one condition and one look; else one line naming the flag."""
    alpha_value = parse_number("--alpha", alpha)
    delta_value = parse_number("--delta", delta)
    if not 0.0 < alpha_value < 1.0:
        raise UsageError(f"--alpha {alpha} is outside (0, 1); give a level such as 0.05")
    if not 0.0 <= delta_value < 1.0:
        raise UsageError(f"--delta {delta} is outside [0, 1); give a margin such as 0.10")
    conditions_value = parse_whole("--conditions", conditions)
    looks_value = parse_whole("--looks", looks)
    if conditions_value < 1:
        raise UsageError(f"--conditions {conditions}: there must be at least one gating condition")
    if looks_value < 1:
        raise UsageError(f"--looks {looks}: there must be at least one look")
    return alpha_value, delta_value, conditions_value, looks_value


def parse_rate(flag: str, text: str) -> float:
    value = parse_number(flag, text)
    if not 0.0 <= value <= 1.0:
        raise UsageError(f"{flag} {text} is not a success rate; give a probability from 0 to 1 such as 0.8")
    return value


def load_rule(name: str | None) -> StatisticalRule:
    """The installed rule ``name``, or without one the rule that marks itself the default; an unknown name lists
    the valid ones (the registry's message), and no default, or two, is one line."""
    from certlab_core.sdk.services import default_rule, installed_plugins

    if name is None:
        return default_rule("--rule is not given")
    rule: StatisticalRule = installed_plugins().get("statistical_rules", name)
    return rule


# --------------------------------------------------------------------------- the rule, held at the plugin boundary
# Each call of the rule's code is bounded (CERTLAB_PLUGIN_LOAD_S) and its answer checked: a rule that raises,
# never returns or answers the wrong shape is one line naming it and its distribution, exit 3.


def namer(rule: StatisticalRule) -> Callable[[str], str]:
    """How a line names each part of the rule: with its distribution, or without one for a rule the registry lacks.

    The installed plugins are discovered once here (a scan of every distribution), not once a part."""
    from certlab_core.sdk.services import installed_plugins

    installed = installed_plugins()

    def whose(part: str) -> str:
        try:
            return installed.part_of("statistical_rules", rule.name, part)
        except CertlabError:  # a rule handed in by code, not installed: it has no distribution to name
            return f"the statistical rule {rule.name}'s {part}"

    return whose


def held_decide(rule: StatisticalRule, named: Callable[[str], str], *args: Any) -> Bounds:
    """``rule.decide(*args)``: its Bounds (their verdict checked as they are made), or one line naming the rule."""
    bounds: Bounds = plugin_call(named("decide"), rule.decide, *args, seconds=plugin_wait_s(), returns=(Bounds,))
    return bounds


def held_interval(
    rule: StatisticalRule, named: Callable[[str], str], successes: int, trials: int, alpha: float
) -> tuple[float, float]:
    """``rule.interval(successes, trials, alpha)``: its two ends, or one line naming the rule."""
    whose = named("interval")
    ends = plugin_call(whose, rule.interval, successes, trials, alpha, seconds=plugin_wait_s(), returns=(tuple, list))
    if len(ends) != 2 or not all(_is_number(end) for end in ends):  # a long answer is shown by its start only
        raise InstrumentError(f"{whose} returned {str(list(ends[:3]))[:80]}, not the interval's two ends")
    return float(ends[0]), float(ends[1])


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def planner(rule: StatisticalRule) -> Callable[..., dict[str, float]]:
    """The rule's ``plan``, held: each design's chance of each verdict, or one line naming the rule."""
    if rule.plan is None:
        raise UsageError(
            f"the statistical rule {rule.name!r} cannot plan: plan and selfcheck need the rule's "
            "StatisticalRule.plan(p_baseline, p_candidate, n, alpha, delta, conditions, looks) -> the exact "
            "P(PASS), P(BLOCK), P(INCONCLUSIVE), which it does not give (see docs/statistics.md, The rule record); "
            "choose another with --rule"
        )
    plan, whose, seconds = rule.plan, namer(rule)("plan"), plugin_wait_s()

    def plain_plan(*args: Any) -> Any:
        """The rule's answer made a plain dict while the deadline holds: a mapping of its own is read only here."""
        answer = plan(*args)
        return dict(answer) if isinstance(answer, Mapping) else answer

    def held_plan(*args: Any) -> dict[str, float]:
        chances = plugin_call(whose, plain_plan, *args, seconds=seconds, returns=(dict,))
        if not all(_is_number(chances.get(verdict)) for verdict in _VERDICTS):
            raise InstrumentError(f"{whose} returned no number for each of PASS, BLOCK and INCONCLUSIVE")
        return {verdict: float(chances[verdict]) for verdict in _VERDICTS}

    return held_plan


# --------------------------------------------------------------------------- reading aids


def per_arm_alpha(
    rule: StatisticalRule, alpha: float, conditions: int, looks: int, named: Callable[[str], str] | None = None
) -> float | None:
    """The level of the per-arm intervals a rule combines, when it says (``StatisticalRule.arm_alpha``; a rule
    made before that field was declared may carry it as ``decide.arm_alpha``)."""
    arm_alpha = rule.arm_alpha if rule.arm_alpha is not None else getattr(rule.decide, "arm_alpha", None)
    if not callable(arm_alpha):
        return None
    whose = (named or namer(rule))("arm_alpha")
    held = plugin_call(whose, arm_alpha, alpha, conditions, looks, seconds=plugin_wait_s(), returns=(int, float))
    return float(held)


def _percent(alpha: float) -> str:
    return f"{100.0 * (1.0 - alpha):.4g}%"


def design_fields(alpha: float, delta: float, conditions: int, looks: int) -> dict[str, Any]:
    """The design's parameters as the JSON output of every stats command carries them."""
    return {"alpha": alpha, "delta": delta, "conditions": conditions, "looks": looks}


def echo_json(schema: str, rule: StatisticalRule, **fields: Any) -> None:
    """Print a command's JSON output: its schema and rule, then its fields (keys sorted, indented)."""
    payload = {"schema": schema, "rule": rule.name, **fields}
    typer.echo(json.dumps(payload, indent=2, sort_keys=True))


def _design(alpha: float, delta: float, conditions: int, looks: int) -> str:
    conditions_text = "1 gating condition" if conditions == 1 else f"{conditions} gating conditions"
    looks_text = "1 look" if looks == 1 else f"{looks} looks"
    return f"alpha {alpha:g}, delta {delta:g}, {conditions_text}, {looks_text}"


# --------------------------------------------------------------------------- stats bounds


def bounds(
    baseline_text: str | None = typer.Option(
        None, "--baseline", metavar="X/N", help="Baseline successes/trials, e.g. 200/200."
    ),
    candidate_text: str | None = typer.Option(
        None, "--candidate", metavar="Y/M", help="Candidate successes/trials, e.g. 130/200."
    ),
    rule_name: str | None = RULE_OPTION,
    alpha_text: str = ALPHA_OPTION,
    delta_text: str = DELTA_OPTION,
    conditions_text: str = CONDITIONS_OPTION,
    looks_text: str = LOOKS_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Bounds on candidate minus baseline success rate, and the verdict they give (one look)."""
    baseline_counts = parse_count("--baseline", required("--baseline", baseline_text, "200/200"))
    candidate_counts = parse_count("--candidate", required("--candidate", candidate_text, "130/200"))
    alpha, delta, conditions, looks = parse_parameters(alpha_text, delta_text, conditions_text, looks_text)
    rule = load_rule(rule_name)
    named = namer(rule)  # one discovery names every part
    decision = held_decide(rule, named, *baseline_counts, *candidate_counts, alpha, delta, conditions, looks)
    arm_alpha = per_arm_alpha(rule, alpha, conditions, looks, named)
    arms: dict[str, dict[str, Any]] = {}
    for arm, (successes, trials) in (("baseline", baseline_counts), ("candidate", candidate_counts)):
        arms[arm] = {
            "successes": successes,
            "trials": trials,
            "rate": successes / trials,
            "interval": list(
                held_interval(rule, named, successes, trials, arm_alpha if arm_alpha is not None else alpha)
            ),
            "interval_alpha": arm_alpha if arm_alpha is not None else alpha,
            "interval_is_the_rules_own": arm_alpha is not None,
            "wilson": list(wilson(successes, trials, alpha)),
            "wilson_alpha": alpha,
        }
    if as_json:
        echo_json(
            "certlab.stats-bounds/1",
            rule,
            **design_fields(alpha, delta, conditions, looks),
            baseline=arms["baseline"],
            candidate=arms["candidate"],
            bounds={"lower": decision.lower, "upper": decision.upper},
            verdict=decision.verdict,
        )
        return
    typer.echo(f"rule {rule.name}: {_design(alpha, delta, conditions, looks)}")
    for arm, facts in arms.items():
        low, high = facts["interval"]
        wilson_low, wilson_high = facts["wilson"]
        which = (
            f"{rule.name} per arm, {_percent(facts['interval_alpha'])}"
            if facts["interval_is_the_rules_own"]
            else f"{rule.name}, {_percent(alpha)}"
        )
        typer.echo(
            f"{arm:<10} {str(facts['successes']) + '/' + str(facts['trials']):<11} rate {facts['rate']:.4f}  "
            f"[{low:.4f}, {high:.4f}] ({which})  "
            f"wilson {_percent(alpha)} [{wilson_low:.4f}, {wilson_high:.4f}] (for reading)"
        )
    typer.echo(f"candidate - baseline: [{decision.lower:.4f}, {decision.upper:.4f}]")
    if decision.verdict == "PASS":
        reason = f"lower bound {decision.lower:.4f} > -delta {-delta:.4f}"
    elif decision.verdict == "BLOCK":
        reason = f"upper bound {decision.upper:.4f} < -delta {-delta:.4f}"
    else:
        reason = f"the bounds contain -delta {-delta:.4f}"
    typer.echo(f"verdict: {decision.verdict} ({reason})")


# --------------------------------------------------------------------------- plan


def plan(
    baseline_text: str | None = typer.Option(
        None, "--baseline", metavar="P", help="The baseline's true success rate, e.g. 0.8."
    ),
    candidate_text: str | None = typer.Option(
        None, "--candidate", metavar="Q", help="The candidate's true success rate, e.g. 0.8."
    ),
    sizes_text: str | None = typer.Option(
        None, "-n", "--n", metavar="N[,N...]", help="Trials per arm: N or N,N,... (separate designs)."
    ),
    rule_name: str | None = RULE_OPTION,
    alpha_text: str = ALPHA_OPTION,
    delta_text: str = DELTA_OPTION,
    conditions_text: str = CONDITIONS_OPTION,
    looks_text: str = LOOKS_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Exact P(PASS), P(BLOCK) and P(INCONCLUSIVE) of each design, by enumerating every binomial outcome."""
    p_baseline = parse_rate("--baseline", required("--baseline", baseline_text, "0.8"))
    p_candidate = parse_rate("--candidate", required("--candidate", candidate_text, "0.8"))
    trials = parse_sizes(required("-n", sizes_text, "200,500"))
    alpha, delta, conditions, looks = parse_parameters(alpha_text, delta_text, conditions_text, looks_text)
    for n in trials:
        if looks > n:
            raise UsageError(f"--looks {looks} is more than -n {n}: every look needs at least one trial per arm")
        if n * looks > MAX_PLAN_TRIAL_LOOKS:
            raise UsageError(
                f"-n {n} at --looks {looks} is {n * looks} trials times looks, more than the {MAX_PLAN_TRIAL_LOOKS} "
                "plan enumerates; give fewer looks or trials"
            )
    rule = load_rule(rule_name)
    plan_of = planner(rule)
    designs: list[dict[str, Any]] = []
    for n in trials:
        chances = plan_of(p_baseline, p_candidate, n, alpha, delta, conditions, looks)
        designs.append({"n": n, "looks": list(look_sizes(n, looks)), **{k: chances[k] for k in _VERDICTS}})
    if as_json:
        echo_json(
            "certlab.plan/1",
            rule,
            baseline=p_baseline,
            candidate=p_candidate,
            alpha=alpha,
            delta=delta,
            conditions=conditions,
            designs=designs,
        )
        return
    parameters = _design(alpha, delta, conditions, looks)
    typer.echo(f"plan: {rule.name}, baseline {p_baseline:g}, candidate {p_candidate:g}, {parameters}")
    typer.echo(f"{'N per arm':>10}  {'P(PASS)':>8}  {'P(BLOCK)':>8}  {'P(INCONCLUSIVE)':>15}  looks at")
    for design in designs:
        typer.echo(
            f"{design['n']:>10}  {design['PASS']:>8.4f}  {design['BLOCK']:>8.4f}  {design['INCONCLUSIVE']:>15.4f}  "
            + ",".join(str(size) for size in design["looks"])
        )


_VERDICTS = ("PASS", "BLOCK", "INCONCLUSIVE")


# --------------------------------------------------------------------------- selfcheck


def _rates_from(start: float) -> list[float]:
    """Baseline rates on the sweep grid (multiples of SWEEP_STEP) from ``start`` up to 1."""
    steps = round(1.0 / SWEEP_STEP)
    return [round(i * SWEEP_STEP, 10) for i in range(steps + 1) if i * SWEEP_STEP >= start - 1e-12]


def _rate_list(rates: list[float]) -> str:
    return ", ".join(f"{rate:g}" for rate in rates)


def selfcheck(
    rule_name: str | None = RULE_OPTION,
    alpha_text: str = ALPHA_OPTION,
    delta_text: str = DELTA_OPTION,
    conditions_text: str = CONDITIONS_OPTION,
    looks_text: str = LOOKS_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """The rule's own operating characteristics by exact enumeration; exit 3 if an error rate exceeds its limit.

    False PASS is swept at the margin (candidate = baseline - delta) and false BLOCK under no
    change (candidate = baseline), over a grid of baseline rates and sizes. Each is compared
    with alpha / K, a gating condition's share, so that K conditions together stay within alpha.
    The maxima are the grid's: the grid is printed with them, and a design off it is not checked
    here (the kernel's tests check the built-in rules on a denser one; see docs/statistics.md).
    """
    alpha, delta, conditions, looks = parse_parameters(alpha_text, delta_text, conditions_text, looks_text)
    smallest = min(SWEEP_SIZES + SELFCHECK_SIZES)
    if looks > smallest:
        raise UsageError(f"--looks {looks} is more than the smallest design checked ({smallest} per arm)")
    rule = load_rule(rule_name)
    plan_of = planner(rule)

    def chances(p_baseline: float, p_candidate: float, n: int) -> dict[str, float]:
        return plan_of(p_baseline, max(0.0, round(p_candidate, 10)), n, alpha, delta, conditions, looks)

    table = []
    for n in SELFCHECK_SIZES:
        for p in SELFCHECK_RATES:
            same = chances(p, p, n)
            row: dict[str, Any] = {
                "n": n,
                "baseline": p,
                "no_change": same,
                "margin_pass": chances(p, p - delta, n)["PASS"] if p - delta >= -1e-12 else None,
                "double_drop_block": chances(p, p - 2 * delta, n)["BLOCK"] if p - 2 * delta >= -1e-12 else None,
            }
            table.append(row)

    limit = alpha / conditions
    false_pass = {"rate": -1.0, "n": 0, "baseline": 0.0}
    false_block = {"rate": -1.0, "n": 0, "baseline": 0.0}
    pass_rates, block_rates = _rates_from(delta), _rates_from(0.0)
    for n in SWEEP_SIZES:
        for p in pass_rates:
            rate = chances(p, p - delta, n)["PASS"]
            if rate > false_pass["rate"]:
                false_pass = {"rate": rate, "n": n, "baseline": p}
        for p in block_rates:
            rate = chances(p, p, n)["BLOCK"]
            if rate > false_block["rate"]:
                false_block = {"rate": rate, "n": n, "baseline": p}
    sweeps = {
        "false_pass_at_margin": {**false_pass, "limit": limit, "holds": false_pass["rate"] <= limit},
        "false_block_no_change": {**false_block, "limit": limit, "holds": false_block["rate"] <= limit},
    }
    holds = all(sweep["holds"] for sweep in sweeps.values())

    if as_json:
        echo_json(
            "certlab.selfcheck/1",
            rule,
            **design_fields(alpha, delta, conditions, looks),
            designs=table,
            sweep={
                "sizes": list(SWEEP_SIZES),
                "step": SWEEP_STEP,
                "false_pass_rates": pass_rates,
                "false_block_rates": block_rates,
                "over": "the grid only: a design off it is not checked",
                **sweeps,
            },
            holds=holds,
        )
    else:
        typer.echo(f"selfcheck: {rule.name}, {_design(alpha, delta, conditions, looks)}; exact enumeration")
        typer.echo("")
        typer.echo(f"{'':>16}  {'no change':^27}  {'drop of delta':>13}  {'drop of 2 delta':>15}")
        typer.echo(
            f"{'N per arm':>9} {'rate':>6}  {'P(PASS)':>8} {'P(BLOCK)':>8} {'P(INC)':>9}  "
            f"{'P(PASS)':>13}  {'P(BLOCK)':>15}"
        )
        for row in table:
            same = row["no_change"]
            margin = "-" if row["margin_pass"] is None else f"{row['margin_pass']:.4f}"
            drop = "-" if row["double_drop_block"] is None else f"{row['double_drop_block']:.4f}"
            typer.echo(
                f"{row['n']:>9} {row['baseline']:>6.2f}  {same['PASS']:>8.4f} {same['BLOCK']:>8.4f} "
                f"{same['INCONCLUSIVE']:>9.4f}  {margin:>13}  {drop:>15}"
            )
        typer.echo("")
        typer.echo(f"the grid: N per arm {', '.join(str(n) for n in SWEEP_SIZES)}")
        typer.echo(f"  baseline rates for false PASS: {_rate_list(pass_rates)}")
        typer.echo(f"  baseline rates for false BLOCK: {_rate_list(block_rates)}")
        for label, key in (
            (f"false PASS at the margin (candidate = baseline - {delta:g})", "false_pass_at_margin"),
            ("false BLOCK under no change (candidate = baseline)", "false_block_no_change"),
        ):
            sweep = sweeps[key]
            typer.echo(
                f"{label}: at most {sweep['rate']:.6f} over the grid (at N={sweep['n']}, baseline "
                f"{sweep['baseline']:g}); limit alpha/K = {limit:g}: {'holds' if sweep['holds'] else 'EXCEEDED'}"
            )
        typer.echo("designs off the grid (other N, other rates) are not checked here; see docs/statistics.md")
    if not holds:
        broken = [key.replace("_", " ") for key, sweep in sweeps.items() if not sweep["holds"]]
        raise InstrumentError(
            f"selfcheck: the rule {rule.name!r} exceeds alpha/K = {limit:g} for {', '.join(broken)} on the grid; "
            "do not gate with it at these parameters"
        )
    if not as_json:
        typer.echo(f"selfcheck: {rule.name} holds its error rates at alpha {alpha:g} over the grid")


def register_stats(app: typer.Typer) -> None:
    stats = typer.Typer(help="Statistics of a rule: bounds from counts.", no_args_is_help=True)
    stats.command("bounds")(bounds)
    app.add_typer(stats, name="stats")


def register_plan(app: typer.Typer) -> None:
    app.command("plan")(plan)


def register_selfcheck(app: typer.Typer) -> None:
    app.command("selfcheck")(selfcheck)
