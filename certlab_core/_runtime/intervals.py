"""The exact per-arm interval: the Clopper-Pearson rule's, no second copy."""

from __future__ import annotations

from certlab_core._runtime.registry import Registry
from certlab_core.plugin.errors import CertlabError
from certlab_core.plugin.types.rule import DEFAULT_RULE, Interval, StatisticalRule

#: What ``exact_interval`` says when no Clopper-Pearson rule is installed.
NO_EXACT_INTERVAL = f"(install the {DEFAULT_RULE} rule, certlab-{DEFAULT_RULE}, for exact intervals)"


def exact_interval(registry: Registry) -> Interval | None:
    """The Clopper-Pearson rule's ``interval(successes, trials, alpha)``; None if no such rule is installed."""
    try:
        return registry.get(StatisticalRule, DEFAULT_RULE).interval
    except CertlabError:
        return None
