"""What a statistical rule's tests check it against: its exact ``plan`` step by step and by simulation, its imports.

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

from certlab_core.plugin.looks import look_sizes

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
