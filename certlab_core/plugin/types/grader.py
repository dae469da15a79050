"""Graders: the record, the request judged, the result, the changes checked."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Literal, Protocol, get_args

import attrs
from attrs import field, frozen

from certlab_core.plugin.types.base import JsonValue, Record
from certlab_core.plugin.types.family import Defect, TaskFamily
from certlab_core.plugin.types.fields import json_map, one_of, text_map
from certlab_core.plugin.types.sandbox import Containment


def _tuple(value: Sequence[Any] | None) -> tuple[Any, ...]:
    return tuple(value or ())


#: The part a grader plays that the kernel asks for by name: ``held_out`` scores the held-out cases (the
#: acceptance grader); a grader with no role is the visible side (the suite, the policy).
GraderRole = Literal["held_out"]
GRADER_ROLES: tuple[str, ...] = get_args(GraderRole)
HELD_OUT_ROLE: GraderRole = "held_out"


# --------------------------------------------------------------------------- graders


@frozen
class Change(Record):
    """One path an agent changed. ``content_b64`` is the new bytes (a symlink's target for
    ``symlink``), None for ``deleted``; ``sha256`` is of those bytes and ``size`` their length.
    ``omitted`` marks a change kept without its content because it was past a cap
    (:data:`DEFAULT_FILE_CAP`, :data:`DEFAULT_TOTAL_CAP`): only its sha256 and size are known."""

    path: str
    kind: str
    sha256: str | None
    content_b64: str | None
    size: int | None = None
    omitted: bool = False


@frozen
class AcceptanceLock(Record):
    """The held-out cases as locked (by certlab-acceptance): scoring reads only ``cases_file``.

    ``cases_file`` is the copy of the cases taken at lock time (outside every work copy),
    ``cases_sha256`` its hash; ``fingerprints`` maps each fingerprinted file (the cases as
    the task holds them, the scorer's files, the kernel's own files) to its sha256 at lock
    time, and ``sources`` maps each group of them to the file or folder to hash again.
    A score is computed only while nothing moved; ``experiment_dir`` is the folder a
    scoring copy must stay out of.
    """

    cases_file: str
    cases_sha256: str
    fingerprints: Mapping[str, str] = field(converter=text_map)
    sources: Mapping[str, str] = field(converter=text_map)
    experiment_dir: str = ""
    seal: str = ""


@frozen
class GradeRequest(Record):
    """What a grader is given: the work copy an agent left and what was issued.

    ``first_failure`` says that only the verdict is wanted, not the count (the mutation proof
    grading a mutant): a grader may stop at its first failing test or held-out case, and its
    detail then tells only what ran. The verdict must be the one a full run gives.
    """

    workdir: str
    family: TaskFamily
    defect: Defect
    issued: Mapping[str, str] = field(converter=text_map)
    expected_tests: tuple[str, ...] = field(converter=_tuple, default=())
    acceptance_lock: AcceptanceLock | None = None
    first_failure: bool = False


@frozen
class GradeResult(Record):
    """A grader's judgement. ``failure_mode`` is the kernel's or one the grader declares; ``data``
    holds facts the kernel may use (the suite grader reports the node ids it collected)."""

    grader: str
    passed: bool
    failure_mode: str | None = None
    detail: str = ""
    data: Mapping[str, JsonValue] = field(factory=dict, converter=json_map)


class Grade(Protocol):
    """A grader's ``grade``: judge the artifacts an agent left; it runs in its own fresh process."""

    def __call__(self, request: GradeRequest, /) -> GradeResult: ...


class GradingService(Protocol):
    """A grader's ``serve``: what it starts once for a run's gradings under one containment, as a context manager.

    Entered in the process that forks the gradings, before the first (``slots`` run at once)
    and left after the last; what it starts (a warm server inside the sandbox) is inherited by
    every grading forked there. It must start no thread in that process. ``environments`` are the
    task environments (``TaskFamily.environment_dir``) the gradings run in (None: the agent
    environment, for a task with none); a grader that runs tests serves each one. ``containment``
    is the trials' sandbox, or uncontained: certify's proofs and calibration, graded by the
    harness, are served once for the tasks with an environment of their own. A coding run's
    trials (``certlab run`` on a family's task) are served as certify's are, and regrade serves
    its gradings the same way, under the containment it runs the bundle's code in. Making it,
    entering and leaving it each have ``CERTLAB_PLUGIN_LOAD_S`` (60 s): past that, or raising,
    it is one line naming the grader, exit 3. Left on an error (a trial or another service that
    broke), it should stop what it started at once rather than wait for it (a leaving past the
    wait is cut short and what it made stays behind); it cannot swallow the error.
    """

    def __call__(
        self, containment: Containment, slots: int, environments: tuple[str | None, ...], /
    ) -> AbstractContextManager[None]: ...


class ChangesCheck(Protocol):
    """A grader's ``check_changes``: judge the changes an agent's trial recorded, once the whole chain passed.

    Returns a failure mode (the kernel's, or one the grader declares) that fails the trial
    whatever its tests say, or None. It runs in the trial's process, and again when the trial
    is regraded (then ``request`` carries no lock) or replayed, for at most a minute. One that
    raises, runs longer, returns anything else or names an undeclared mode is the trial's
    grader error, naming the grader, as a ``grade`` that breaks is: never a verdict.
    """

    def __call__(self, request: GradeRequest, changes: Sequence[Change], /) -> str | None: ...


@frozen
class Grader(Record):
    """A grader: ``grade(request) -> GradeResult``, run in its own fresh process.

    Graders run in ascending ``order`` and the chain stops at the first that fails.
    ``failure_modes`` declares every mode the grader may name: the kernel's
    (``certlab_core.plugin.failure_modes``) or modes of its own, which reports then count
    like the kernel's; a mode neither the kernel nor the grader declares is an error
    naming the grader. ``serve``, when given, is started once per run and containment
    (``GradingService``); ``grade`` must give the same result without it.
    ``check_changes``, when given, judges the trial's recorded changes after the chain
    passed (``ChangesCheck``): the acceptance grader fails a trial whose changes hold the
    held-out answers as ``answers-leaked``. ``role`` is the part the kernel asks for by name
    (:data:`GRADER_ROLES`): ``held_out`` marks the grader of the held-out cases; None, the visible side.
    """

    name: str
    order: int
    description: str
    grade: Grade = field(eq=False, repr=False)
    failure_modes: tuple[str, ...] = field(converter=_tuple, default=())
    serve: GradingService | None = field(default=None, eq=False, repr=False)
    check_changes: ChangesCheck | None = field(default=None, eq=False, repr=False)
    role: GraderRole | None = field(default=None, validator=attrs.validators.optional(one_of(GRADER_ROLES)))
