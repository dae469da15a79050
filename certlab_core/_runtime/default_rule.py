"""The default statistical rule: the one installed rule that marks itself so.

The kernel names no rule. A rule record says it is the default (``StatisticalRule.default``,
certlab-clopper-pearson's does); a descriptor without ``rule.name``, a certification's exact
intervals and ``certlab stats`` without ``--rule`` ask for it here. None installed, or two,
is one line when something needs it.
"""

from __future__ import annotations

from attrs import frozen

from certlab_core._runtime.registry import Registry
from certlab_core.plugin.errors import InstrumentError, UsageError
from certlab_core.plugin.types.rule import Interval, StatisticalRule
from certlab_core.sdk.deadline import plugin_call

#: What a contract says for an interval when no installed rule marks itself the default.
NO_EXACT_INTERVAL = (
    "(no exact interval: install a statistical rule that marks itself the default; 'certlab plugins' lists them)"
)


def default_rules(registry: Registry) -> list[StatisticalRule]:
    """Every installed rule that marks itself the default, by name (a name two plugins provide is refused)."""
    rules = registry.all(StatisticalRule)
    return [rules[name] for name in sorted(rules) if rules[name].default is True]


def default_rule(registry: Registry, needed_by: str) -> StatisticalRule:
    """The one installed rule that marks itself the default; ``needed_by`` opens the one line that refuses none
    or two ("rule.name is left out", "--rule is not given")."""
    found = default_rules(registry)
    if len(found) == 1:
        return found[0]
    if found:
        named = ", ".join(
            f"{rule.name} ({registry.describe_source(registry.plugin_name_of(StatisticalRule, rule.name))})"
            for rule in found
        )
        raise UsageError(
            f"{needed_by}, and {len(found)} installed statistical rules mark themselves the default: {named}; "
            "name the rule, or uninstall all but one of them"
        )
    installed = ", ".join(registry.names(StatisticalRule))
    choose = f"name one of the installed rules ({installed})" if installed else "no rule is installed"
    raise UsageError(
        f"{needed_by}, and no installed statistical rule marks itself the default: {choose}, or install a rule "
        f"that does ({registry.providers.install_line('statistical_rules')})"
    )


def exact_interval(registry: Registry) -> Interval | None:
    """The default rule's ``interval(successes, trials, alpha)``, guarded (:func:`guarded_interval`); None when
    no installed rule marks itself the default (two that do are refused in one line)."""
    found = default_rules(registry)
    if not found:
        return None
    return guarded_interval(registry, default_rule(registry, "an exact interval needs the default statistical rule"))


def exact_interval_name(registry: Registry | None) -> str:
    """What heads the default rule's exact interval in a contract or a summary: its ``interval_name`` (for
    certlab-clopper-pearson's, "Clopper-Pearson"), else its name; "exact interval" when none is installed."""
    found = default_rules(registry) if registry is not None else []
    if len(found) != 1:
        return "exact interval"
    return found[0].interval_name or found[0].name


def guarded_interval(registry: Registry, rule: StatisticalRule) -> GuardedInterval:
    """``rule.interval`` as every caller in the harness calls it (:class:`GuardedInterval`)."""
    return GuardedInterval(
        registry.part_of("statistical_rules", rule.name, "interval"),
        rule.interval,
        registry.load_s,
        rule.interval_name or rule.name,
    )


@frozen
class GuardedInterval:
    """A rule's ``interval`` under the plugin wait, its answer checked; it pickles (the report's workers get it).

    One that raises, runs past ``wait_s`` (``CERTLAB_PLUGIN_LOAD_S``), or returns anything but two
    numbers with 0 <= low <= high <= 1 is one line naming the rule and its distribution (exit 3).
    """

    whose: str
    interval: Interval
    wait_s: float
    #: what heads the interval in a report or a contract: the rule's ``interval_name``, else its name
    name: str = ""

    def __call__(self, successes: int, n: int, alpha: float, /) -> tuple[float, float]:
        bounds = plugin_call(self.whose, self.interval, successes, n, alpha, seconds=self.wait_s, returns=(tuple, list))
        numbers = [b for b in bounds if isinstance(b, int | float) and not isinstance(b, bool)]
        if len(numbers) != 2 or len(bounds) != 2 or not 0 <= numbers[0] <= numbers[1] <= 1:
            raise InstrumentError(
                f"{self.whose} returned {str(bounds)[:80]} for {successes}/{n}, "
                "not (low, high) with 0 <= low <= high <= 1"
            )
        return float(numbers[0]), float(numbers[1])
