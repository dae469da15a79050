"""Statistical rules: record, bounds, verdict, what plan and selfcheck use."""

from __future__ import annotations

from typing import Literal, Protocol, get_args

from attrs import field, frozen
from attrs.validators import instance_of, optional

from certlab_core.plugin.types.base import Record
from certlab_core.plugin.types.fields import one_of

GateVerdict = Literal["PASS", "BLOCK", "INCONCLUSIVE"]
GATE_VERDICTS: tuple[GateVerdict, ...] = get_args(GateVerdict)


# --------------------------------------------------------------------------- statistics


@frozen
class Bounds(Record):
    """Bounds on candidate minus baseline success rate, and what they decide."""

    lower: float
    upper: float
    verdict: GateVerdict = field(validator=one_of(GATE_VERDICTS))


class Decide(Protocol):
    """A rule's ``decide``: the bounds on candidate minus baseline and the verdict at one look."""

    def __call__(
        self,
        baseline_successes: int,
        baseline_n: int,
        candidate_successes: int,
        candidate_n: int,
        alpha: float = ...,
        delta: float = ...,
        conditions: int = ...,
        looks: int = ...,
    ) -> Bounds: ...


class Interval(Protocol):
    """A rule's per-arm interval at two-sided level ``alpha``: ``(low, high)``."""

    def __call__(self, successes: int, n: int, alpha: float, /) -> tuple[float, float]: ...


class Plan(Protocol):
    """A rule's ``plan``: the exact probabilities of ``PASS``, ``BLOCK`` and ``INCONCLUSIVE``."""

    def __call__(
        self,
        p_baseline: float,
        p_candidate: float,
        n: int,
        alpha: float = ...,
        delta: float = ...,
        conditions: int = ...,
        looks: int = ...,
    ) -> dict[str, float]: ...


class ArmAlpha(Protocol):
    """A rule's ``arm_alpha``: the two-sided level of each per-arm interval ``decide`` combines at one look."""

    def __call__(self, alpha: float, conditions: int, looks: int, /) -> float: ...


@frozen
class StatisticalRule(Record):
    """A decision rule, pure functions of counts and the sealed parameters.

    - ``decide(baseline_successes, baseline_n, candidate_successes, candidate_n, alpha,
      delta, conditions, looks) -> Bounds``: the bounds on candidate minus baseline and
      the verdict at one look (``alpha`` is the experiment's; the rule splits it over
      ``conditions`` and ``looks`` itself); the gate, ``certlab stats bounds`` and replay use it;
    - ``interval(successes, n, alpha) -> (low, high)``: the per-arm interval the rule
      uses, at two-sided level ``alpha``;
    - ``plan(p_baseline, p_candidate, n, alpha, delta, conditions, looks) -> dict`` with
      the exact probabilities of ``PASS``, ``BLOCK`` and ``INCONCLUSIVE`` for ``n`` trials
      per arm, stopping at the first decisive look. ``certlab plan`` and ``certlab selfcheck``
      need it, and so does the HTML report's operating characteristic; without it (None)
      they refuse, saying so. A two-arm interval rule gets one from certlab-rule-support
      (``certlab_rule_support.two_arm_rule.Plan``);
    - ``arm_alpha(alpha, conditions, looks) -> float``, optional: the two-sided level of each
      per-arm interval ``decide`` combines at one look (clopper-pearson: alpha/(2KL)).
      ``certlab stats bounds`` shows the per-arm intervals at that level; without it, at
      ``alpha``, and says they are not the rule's own.

    ``interval_name``: how a contract or summary heads the per-arm exact interval the rule's
    ``interval`` gives ("Clopper-Pearson"); None: the rule's name heads it.

    ``default``: the rule marks itself the default, the one a descriptor without ``rule.name``,
    a certification's exact intervals and ``certlab stats`` without ``--rule`` use (the kernel
    names no rule: certlab-clopper-pearson's marks itself so). Two installed defaults, or none,
    are refused in one line where a default is needed.
    """

    name: str
    description: str
    decide: Decide = field(eq=False, repr=False)
    interval: Interval = field(eq=False, repr=False)
    plan: Plan | None = field(default=None, eq=False, repr=False)
    arm_alpha: ArmAlpha | None = field(default=None, eq=False, repr=False)
    default: bool = field(default=False, validator=instance_of(bool))
    interval_name: str | None = field(default=None, validator=optional(instance_of(str)))
