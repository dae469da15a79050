"""What a rule's tests check: its exact ``plan``, stepwise and simulated.

Both references call the rule's own ``decide`` for every pair of counts, so they test that
``plan`` enumerates what ``decide`` would say, look by look, stopping at the first decisive
look:

- ``stepwise_plan``: plain dynamic programming over the per-look increments (scipy's binomial);
- ``monte_carlo_plan``: the share of simulated experiments that end in each verdict.

``decide_cases`` draws (with hypothesis) the counts and parameters a property test of
``decide`` runs on.

``heavy_modules_after_importing`` names what a fresh interpreter loaded of numpy and scipy
after importing a rule's plugin module (it must be nothing: trials fork from a lean parent).
numpy and scipy are imported inside the functions (the kernel imports without them).
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from attrs import frozen

from certlab_core.sdk.looks import look_sizes

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

VERDICTS = ("PASS", "BLOCK", "INCONCLUSIVE")
HEAVY_MODULES = ("scipy", "numpy")

# verdict(baseline_successes, candidate_successes, trials_per_arm, alpha, delta, looks) -> PASS, BLOCK or INCONCLUSIVE
VerdictOf = Callable[[int, int, int, float, float, int], str]


def cached_verdicts(decide: Callable[..., Any]) -> VerdictOf:
    """``decide``'s verdict for two arms of equal size, remembered (the references ask for each pair many times)."""

    @functools.cache
    def verdict(b: int, c: int, size: int, alpha: float, delta: float, looks: int) -> str:
        return str(decide(b, size, c, size, alpha=alpha, delta=delta, looks=looks).verdict)

    return verdict


@frozen
class DecideCase:
    """One call of ``decide``: each arm's counts, and the parameters."""

    baseline_successes: int
    baseline_n: int
    candidate_successes: int
    candidate_n: int
    alpha: float
    delta: float
    conditions: int
    looks: int

    @property
    def estimate(self) -> float:
        """The observed candidate rate minus the observed baseline rate."""
        return self.candidate_successes / self.candidate_n - self.baseline_successes / self.baseline_n

    def decide(self, decide: Callable[..., Any]) -> Any:
        """``decide``'s answer for this case."""
        return decide(
            self.baseline_successes,
            self.baseline_n,
            self.candidate_successes,
            self.candidate_n,
            alpha=self.alpha,
            delta=self.delta,
            conditions=self.conditions,
            looks=self.looks,
        )


def decide_cases() -> SearchStrategy[DecideCase]:
    """Cases of 1 to 400 trials per arm, any share of successes, alpha 0.001 to 0.5, delta 0 to 0.99, K 1-8, L 1-10."""
    from hypothesis import strategies as st

    def case(n_b: int, n_c: int, frac_b: float, frac_c: float, alpha: float, delta: float, k: int, looks: int) -> Any:
        return DecideCase(round(frac_b * n_b), n_b, round(frac_c * n_c), n_c, alpha, delta, k, looks)

    return st.builds(
        case,
        n_b=st.integers(1, 400),
        n_c=st.integers(1, 400),
        frac_b=st.floats(0, 1),
        frac_c=st.floats(0, 1),
        alpha=st.floats(0.001, 0.5),
        delta=st.floats(0, 0.99),
        k=st.integers(1, 8),
        looks=st.integers(1, 10),
    )


def stepwise_plan(
    verdict: VerdictOf, p_baseline: float, p_candidate: float, n: int, alpha: float, delta: float, looks: int
) -> dict[str, float]:
    """Plain dynamic programming over the per-look increments, calling ``verdict`` for every pair of counts."""
    import numpy as np
    from scipy import stats

    undecided = {(0, 0): 1.0}
    totals = dict.fromkeys(VERDICTS, 0.0)
    done = 0
    for size in look_sizes(n, looks):
        step = size - done
        pmf_b = stats.binom.pmf(np.arange(step + 1), step, p_baseline)
        pmf_c = stats.binom.pmf(np.arange(step + 1), step, p_candidate)
        reached: dict[tuple[int, int], float] = {}
        for (b, c), mass in undecided.items():
            for i in range(step + 1):
                for j in range(step + 1):
                    reached[(b + i, c + j)] = reached.get((b + i, c + j), 0.0) + mass * pmf_b[i] * pmf_c[j]
        undecided = {}
        for (b, c), mass in reached.items():
            decided = verdict(b, c, size, alpha, delta, looks)
            if decided == "INCONCLUSIVE":
                undecided[(b, c)] = mass
            else:
                totals[decided] += mass
        done = size
    totals["INCONCLUSIVE"] = sum(undecided.values())
    return totals


def monte_carlo_plan(
    verdict: VerdictOf,
    p_baseline: float,
    p_candidate: float,
    n: int,
    alpha: float,
    delta: float,
    looks: int,
    seed: int,
    runs: int = 40_000,
) -> dict[str, float]:
    """How often each verdict ends ``runs`` seeded simulated experiments that stop at the first decisive look."""
    import numpy as np

    sizes = look_sizes(n, looks)
    tables = {
        size: np.array([[verdict(b, c, size, alpha, delta, looks) for c in range(size + 1)] for b in range(size + 1)])
        for size in sizes
    }
    rng = np.random.default_rng(seed)
    baseline = np.cumsum(rng.random((runs, n)) < p_baseline, axis=1)
    candidate = np.cumsum(rng.random((runs, n)) < p_candidate, axis=1)
    outcome = np.full(runs, "INCONCLUSIVE", dtype=object)
    open_runs = np.ones(runs, dtype=bool)
    for size in sizes:
        verdicts = tables[size][baseline[:, size - 1], candidate[:, size - 1]]
        stops = open_runs & (verdicts != "INCONCLUSIVE")
        outcome[stops] = verdicts[stops]
        open_runs &= ~stops
    return {name: float(np.mean(outcome == name)) for name in VERDICTS}


def heavy_modules_after_importing(module: str) -> list[str]:
    """Which of ``HEAVY_MODULES`` a fresh interpreter has loaded after ``import module`` (none is the rule)."""
    code = (
        f"import json, sys, {module}\nprint(json.dumps([name for name in {HEAVY_MODULES!r} if name in sys.modules]))\n"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    heavy: list[str] = json.loads(completed.stdout)
    return heavy


# --------------------------------------------------------------------------- the conformance suite

#: (p_baseline, p_candidate, n, looks): designs whose plan must be a probability over the three verdicts.
SUM_DESIGNS: tuple[tuple[float, float, int, int], ...] = (
    (0.8, 0.8, 200, 1),
    (0.9, 0.7, 300, 3),
    (0.0, 0.0, 50, 1),
    (1.0, 1.0, 50, 2),
    (0.5, 0.45, 5000, 4),
)
#: (p_baseline, p_candidate, n, alpha, delta, looks): designs whose plan is checked against ``stepwise_plan``.
STEPWISE_DESIGNS: tuple[tuple[float, float, int, float, float, int], ...] = (
    (0.9, 0.8, 30, 0.05, 0.2, 1),
    (0.9, 0.9, 12, 0.2, 0.3, 3),
    (0.95, 0.6, 16, 0.1, 0.25, 4),
)
#: Designs at which ``certlab selfcheck``'s two error rates are checked: false PASS at the margin, false BLOCK.
ERROR_RATE_DESIGNS: tuple[tuple[float, int, float, float, int, int], ...] = (
    (0.9, 40, 0.05, 0.1, 1, 1),  # p_baseline, n, alpha, delta, conditions, looks
    (0.7, 60, 0.05, 0.15, 2, 2),
    (0.95, 100, 0.1, 0.05, 1, 3),
)


class RuleConformance:
    """The conformance suite every statistical rule runs against itself; set ``rule_name``.

    It checks what the gate, ``certlab plan``, ``certlab selfcheck`` and ``certlab stats
    bounds`` rely on: ``decide`` gives ordered bounds around the estimate and the verdict
    they imply; ``interval`` holds the observed rate; ``plan`` exists (without it plan and
    selfcheck refuse the rule), is a probability over PASS, BLOCK and INCONCLUSIVE, equals a
    step-by-step enumeration through ``decide`` and a simulation; the error rates selfcheck
    sweeps stay within alpha/K at a few designs; ``arm_alpha``, when given, is a level within
    alpha; importing the plugin loads neither numpy nor scipy.

    Example (the rule's ``tests/test_conformance.py``)::

        from certlab_core.testing import RuleConformance

        class TestMyRule(RuleConformance):
            rule_name = "my-rule"
    """

    rule_name: str = ""
    sum_designs = SUM_DESIGNS
    stepwise_designs = STEPWISE_DESIGNS
    #: (p_baseline, p_candidate, n, alpha, delta, looks, seed): a design where both PASS and BLOCK happen.
    monte_carlo_design: tuple[float, float, int, float, float, int, int] = (0.85, 0.7, 40, 0.2, 0.15, 2, 7)
    error_rate_designs = ERROR_RATE_DESIGNS

    def rule(self) -> Any:
        """The rule under test: the installed one named ``rule_name``."""
        import pytest

        from certlab_core._runtime.registry import discover

        if not self.rule_name:
            pytest.fail("set rule_name on the RuleConformance subclass")
        return discover().get("statistical_rules", self.rule_name)

    def _plan(self) -> Any:
        import pytest

        plan = self.rule().plan
        if plan is None:
            pytest.fail(f"the rule {self.rule_name} has no plan: certlab plan and certlab selfcheck refuse it")
        return plan

    def test_it_can_plan(self) -> None:
        self._plan()

    def test_decide_gives_ordered_bounds_around_the_estimate_and_the_verdict_they_imply(self) -> None:
        from hypothesis import HealthCheck, Phase, given, settings

        decide = self.rule().decide

        # No shrinking: a case is small as drawn, and a rule wrong everywhere would be shrunk for minutes.
        @settings(
            max_examples=200,
            deadline=None,
            database=None,
            phases=(Phase.explicit, Phase.generate),
            report_multiple_bugs=False,
            suppress_health_check=(HealthCheck.too_slow,),
        )
        @given(case=decide_cases())
        def check(case: DecideCase) -> None:
            bounds = case.decide(decide)
            estimate = case.estimate
            delta = case.delta
            expected = "PASS" if bounds.lower > -delta else "BLOCK" if bounds.upper < -delta else "INCONCLUSIVE"
            problems = []
            if not -1.0 <= bounds.lower <= estimate + 1e-12:
                problems.append(f"lower bound {bounds.lower} past the estimate {estimate}")
            if not estimate - 1e-12 <= bounds.upper <= 1.0:
                problems.append(f"upper bound {bounds.upper} short of the estimate {estimate}")
            if bounds.verdict != expected:
                problems.append(f"verdict {bounds.verdict} where its bounds give {expected}")
            assert not problems, f"{case}: " + "; ".join(problems)

        check()

    def test_interval_holds_the_observed_rate_within_the_unit_range(self) -> None:
        interval = self.rule().interval
        for successes, n, alpha in ((0, 7, 0.05), (7, 7, 0.05), (3, 11, 0.01), (130, 200, 0.0125), (1, 1, 0.5)):
            low, high = interval(successes, n, alpha)
            rate = successes / n
            assert 0.0 <= low <= rate + 1e-12 and rate - 1e-12 <= high <= 1.0, (
                f"interval({successes}, {n}, {alpha}) = ({low}, {high}) does not hold {rate}"
            )

    def test_plan_is_a_probability_over_the_three_verdicts(self) -> None:
        plan = self._plan()
        for p_baseline, p_candidate, n, looks in self.sum_designs:
            chances = plan(p_baseline, p_candidate, n, looks=looks)
            assert set(chances) == set(VERDICTS), f"plan gave {sorted(chances)}, not {VERDICTS}"
            assert all(0.0 <= chances[v] <= 1.0 for v in VERDICTS), chances
            assert abs(sum(chances.values()) - 1.0) < 1e-12, f"plan{(p_baseline, p_candidate, n, looks)}: {chances}"

    def test_plan_equals_stepwise_enumeration_through_decide(self) -> None:
        plan = self._plan()
        verdict = cached_verdicts(self.rule().decide)
        for p_baseline, p_candidate, n, alpha, delta, looks in self.stepwise_designs:
            chances = plan(p_baseline, p_candidate, n, alpha=alpha, delta=delta, looks=looks)
            reference = stepwise_plan(verdict, p_baseline, p_candidate, n, alpha, delta, looks)
            assert max(reference["PASS"], reference["BLOCK"]) > 0.01, "a design where the rule decides nothing"
            for name in VERDICTS:
                assert abs(chances[name] - reference[name]) < 1e-12, (
                    f"plan says P({name}) = {chances[name]}, decide step by step {reference[name]} "
                    f"at {(p_baseline, p_candidate, n, alpha, delta, looks)}"
                )

    def test_plan_agrees_with_a_monte_carlo_estimate(self) -> None:
        plan = self._plan()
        p_baseline, p_candidate, n, alpha, delta, looks, seed = self.monte_carlo_design
        runs = 40_000
        verdict = cached_verdicts(self.rule().decide)
        estimates = monte_carlo_plan(verdict, p_baseline, p_candidate, n, alpha, delta, looks, seed=seed, runs=runs)
        chances = plan(p_baseline, p_candidate, n, alpha=alpha, delta=delta, looks=looks)
        for name in VERDICTS:
            tolerance = 4.5 * (max(chances[name] * (1 - chances[name]), 1e-4) / runs) ** 0.5
            assert abs(estimates[name] - chances[name]) < tolerance, (
                f"plan says P({name}) = {chances[name]}, {runs} simulated experiments {estimates[name]}"
            )

    def test_its_error_rates_stay_within_alpha_over_k(self) -> None:
        plan = self._plan()
        for p, n, alpha, delta, conditions, looks in self.error_rate_designs:
            limit = alpha / conditions
            false_pass = plan(p, round(p - delta, 10), n, alpha, delta, conditions, looks)["PASS"]
            false_block = plan(p, p, n, alpha, delta, conditions, looks)["BLOCK"]
            design = f"baseline {p}, n {n}, alpha {alpha}, delta {delta}, K {conditions}, L {looks}"
            assert false_pass <= limit + 1e-12, f"false PASS at the margin {false_pass:.4f} > {limit:.4f} ({design})"
            assert false_block <= limit + 1e-12, (
                f"false BLOCK under no change {false_block:.4f} > {limit:.4f} ({design})"
            )

    def test_arm_alpha_is_a_level_within_alpha(self) -> None:
        import pytest

        arm_alpha = self.rule().arm_alpha
        if arm_alpha is None:
            pytest.skip("the rule declares no arm_alpha: certlab stats bounds shows its intervals at alpha")
        for alpha, conditions, looks in ((0.05, 1, 1), (0.05, 3, 2), (0.2, 2, 5)):
            level = arm_alpha(alpha, conditions, looks)
            assert 0.0 < level <= alpha, f"arm_alpha({alpha}, {conditions}, {looks}) = {level}"

    def test_importing_the_plugin_imports_neither_scipy_nor_numpy(self) -> None:
        from importlib.metadata import entry_points

        from certlab_core._runtime.registry import discover

        distribution = discover().plugin_of("statistical_rules", self.rule_name).distribution
        modules = [
            ep.module
            for ep in entry_points(group="certlab.plugins")
            if ep.dist is not None and ep.dist.name == distribution
        ]
        assert modules, f"no certlab.plugins entry point of {distribution} is installed"
        for module in modules:
            heavy = heavy_modules_after_importing(module)
            assert heavy == [], f"importing {module} loads {heavy}: trials fork from a lean parent"
