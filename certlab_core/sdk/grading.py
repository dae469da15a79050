"""The grader chain: the installed graders in order, each in a forked process.

What a certification's trial and a gate's trial both grade with, and what a plugin's own
command or test may run a work copy through (``run_chain(grader_chain(installed), request)``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from attrs import frozen

from certlab_core.plugin import failure_modes as fm
from certlab_core.plugin.errors import UsageError
from certlab_core.plugin.types.grader import HELD_OUT_ROLE, Change, Grader, GradeRequest, GradeResult
from certlab_core.sdk.deadline import TooSlow, deadline
from certlab_core.sdk.forking import ForkedCallError, call_in_fork

#: How long one grader may take on one work copy before the chain reports it broken.
GRADER_TIMEOUT_S = 300.0
#: How long a grader's ``check_changes`` may take on a trial's recorded changes (it reads them; it runs nothing).
CHANGES_CHECK_TIMEOUT_S = 60.0


def chain_time_limit_s(graders: Sequence[Grader]) -> float:
    """The longest the chain may take on one trial: each grader's limit, and its changes check's."""
    return len(graders) * (GRADER_TIMEOUT_S + CHANGES_CHECK_TIMEOUT_S)


class GraderIndex(Protocol):
    """What the chain reads of the installed plugins: every record of a kind, by name."""

    def all(self, kind: str, /) -> dict[str, Any]: ...


@frozen
class ChainResult:
    grades: tuple[GradeResult, ...]
    error: str | None = None

    @property
    def passed(self) -> bool:
        return self.error is None and all(g.passed for g in self.grades)

    @property
    def failure_mode(self) -> str | None:
        for grade in self.grades:
            if not grade.passed:
                return grade.failure_mode
        return None


def grader_chain(registry: GraderIndex) -> list[Grader]:
    """The installed graders in the order they run (ascending ``order``, then name)."""
    graders = sorted(registry.all("graders").values(), key=lambda g: (g.order, g.name))
    if not graders:
        raise UsageError("no grader is installed; run 'certlab plugins' to see what is installed")
    return graders


def scores_held_out(grader: Grader) -> bool:
    """Whether the grader declares the held-out role (it scores the held-out cases); every other is the visible side."""
    return grader.role == HELD_OUT_ROLE


def held_out_names(graders: Sequence[Grader]) -> frozenset[str]:
    """The names of the graders that declare the held-out role."""
    return frozenset(grader.name for grader in graders if scores_held_out(grader))


def run_chain(
    graders: Sequence[Grader], request: GradeRequest, settled: Callable[[Grader], bool] | None = None
) -> ChainResult:
    """Run each grader in its own fresh forked process, in order, stopping at the first failure.

    ``settled(grader)``, asked of a grader once every grader before it passed, says its grading can change nothing
    (a certification's impossible twin whose cheat is already named); such a grader is not run.
    """
    grades: list[GradeResult] = []
    for grader in graders:
        if settled is not None and settled(grader):
            continue
        try:
            result = call_in_fork(grader.grade, request, timeout=GRADER_TIMEOUT_S, temp_prefix="certlab-grader-")
        except ForkedCallError as error:
            return ChainResult(tuple(grades), f"grader {grader.name} broke: {error.failure.summary}")
        if not isinstance(result, GradeResult):
            return ChainResult(tuple(grades), f"grader {grader.name} returned {type(result).__name__}, not GradeResult")
        try:
            fm.check(result.failure_mode, grader.failure_modes)
        except ValueError as error:
            return ChainResult(tuple(grades), f"grader {grader.name} returned an undeclared failure mode: {error}")
        grades.append(result)
        if not result.passed:
            break
    return ChainResult(tuple(grades))


def checked_changes(
    chain: ChainResult, graders: Sequence[Grader], request: GradeRequest, changes: Sequence[Change]
) -> tuple[ChainResult, str | None]:
    """The chain once the graders' ``check_changes`` judged a trial's recorded changes, and the mode one named.

    Only a chain that passed is checked (any other comes back as it is, with None). The first
    grader whose check names a failure mode decides (the acceptance grader names ``answers-leaked``);
    None when none does, or none has such a check. A check runs in this process, under the
    grader's check limit: one that raises, runs past ``CHANGES_CHECK_TIMEOUT_S``, returns neither None
    nor a string, or names a mode its grader does not declare leaves the chain with an error
    naming the grader, as a grader whose grading breaks does; never a verdict.
    """
    if not chain.passed:
        return chain, None
    for grader in graders:
        if grader.check_changes is None:
            continue
        whose = f"grader {grader.name}'s check of the changes"
        try:
            with deadline(CHANGES_CHECK_TIMEOUT_S):
                mode = grader.check_changes(request, changes)
        except TooSlow:
            return ChainResult(chain.grades, f"{whose} did not return within {CHANGES_CHECK_TIMEOUT_S:g} s"), None
        except Exception as error:  # a plugin's code
            return ChainResult(chain.grades, f"{whose} raised {type(error).__name__}: {str(error)[:160]}"), None
        if mode is None:
            continue
        if not isinstance(mode, str):
            return ChainResult(
                chain.grades, f"{whose} returned {type(mode).__name__}, not a failure mode or None"
            ), None
        try:
            return chain, fm.check(mode, grader.failure_modes)
        except ValueError as error:
            return ChainResult(
                chain.grades, f"grader {grader.name} judged the changes with an undeclared mode: {error}"
            ), None
    return chain, None
