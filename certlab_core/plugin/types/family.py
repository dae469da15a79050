"""Task families: the ``certlab_task_families`` record, defects and seeds."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import attrs
from attrs import field, frozen

from certlab_core.plugin.types.base import Record


def _tuple(value: Sequence[Any] | None) -> tuple[Any, ...]:
    return tuple(value or ())


# --------------------------------------------------------------------------- families


@frozen
class Seed(Record):
    """One textual edit that turns a clean file into a seeded one.

    ``find`` must occur exactly once in the clean file ``path`` (relative to the tree);
    the seeded file has it replaced by ``replace``.
    """

    path: str
    find: str
    replace: str


@frozen
class Defect(Record):
    """A proven, seeded defect: one task of a repo family."""

    id: str
    defect_class: str
    description: str
    seeds: tuple[Seed, ...] = field(converter=_tuple)


def _share(_instance: object, attribute: attrs.Attribute[float], value: object) -> None:
    """A share from 0 to 1 (a mutation score threshold); anything else is refused, naming the field."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{attribute.name} must be a share from 0 to 1, e.g. 0.8; got {value!r}")


@frozen
class TaskFamily(Record):
    """A repo task family: a clean tree, its visible tests, an edit policy and seeded defects.

    ``tree_dir`` holds the clean tree (code and visible tests) as issued to an agent,
    ``prompt_file`` the TASK.md given to every agent, ``cases_file`` the held-out
    acceptance cases (JSON lines), which never enter a work copy. ``allowed_paths`` are
    glob patterns (``fnmatch`` per folder, ``*`` never crossing a ``/``; see ``in_allowed_paths``), relative
    to the tree, an agent may change; ``test_paths``
    are the files or folders of the visible suite; ``module_names`` are the top-level
    modules under test, which must be imported from the work copy under test.
    """

    name: str
    version: str
    description: str
    tree_dir: str
    prompt_file: str
    cases_file: str
    allowed_paths: tuple[str, ...] = field(converter=_tuple)
    test_paths: tuple[str, ...] = field(converter=_tuple)
    module_names: tuple[str, ...] = field(converter=_tuple)
    defects: tuple[Defect, ...] = field(converter=_tuple)
    # False for a user's own task (staged by a task source, ``types.task_source``): the tree as issued holds the
    # defect and no fixed tree is known, so proving means the issued tree fails its grading.
    clean_tree: bool = True
    # A task of the user's own that knows its answer (one built from a bug-fix commit): the fixture as it
    # should be, staged beside the issued tree and hidden like it. The constructed oracle restores the files
    # an agent may change from it, so the task is calibrated like a family's; None when no answer is known.
    answer_dir: str | None = None
    # The virtual environment a task's tests run in (its project's declared dependencies and pytest, made once
    # when the task was built, ``task_environments_dir()``); None: the agent environment's. Read-only in the sandbox.
    environment_dir: str | None = None
    # The least share of the clean tree's mutants the visible suite and held-out cases must kill
    # together (certlab-mutation's proof); FamilyConformance fails below it, certify and prove warn.
    mutation_threshold: float = field(default=0.9, validator=_share)
    # The least share the visible suite must kill alone (every grader but the held-out one): a weak visible suite
    # lets plausible wrong fixes look right to the agent, whatever the held-out cases catch afterwards.
    # FamilyConformance fails below it, certify and prove warn, ``--min-mutation-score`` refuses (see docs/mutation.md).
    visible_mutation_threshold: float = field(default=0.8, validator=_share)

    #: The standard layout of a family folder shipped in a distribution.
    TREE, PROMPT, CASES = "tree", "TASK.md", "acceptance.jsonl"

    @classmethod
    def in_folder(
        cls,
        folder: str | os.PathLike[str],
        *,
        name: str,
        version: str,
        description: str,
        allowed_paths: Sequence[str],
        test_paths: Sequence[str],
        module_names: Sequence[str],
        defects: Sequence[Defect],
        clean_tree: bool = True,
        answer_dir: str | None = None,
        environment_dir: str | None = None,
        mutation_threshold: float = 0.9,
        visible_mutation_threshold: float = 0.8,
    ) -> TaskFamily:
        """A family laid out the standard way: ``folder/tree`` (the clean tree with its visible
        tests), ``folder/TASK.md`` (the prompt) and ``folder/acceptance.jsonl`` (held-out cases).

        The other fields are the record's own, by keyword (a misspelt one is a type error)."""
        root = os.fspath(folder)
        return cls(
            name=name,
            version=version,
            description=description,
            tree_dir=os.path.join(root, cls.TREE),
            prompt_file=os.path.join(root, cls.PROMPT),
            cases_file=os.path.join(root, cls.CASES),
            allowed_paths=allowed_paths,
            test_paths=test_paths,
            module_names=module_names,
            defects=defects,
            clean_tree=clean_tree,
            answer_dir=answer_dir,
            environment_dir=environment_dir,
            mutation_threshold=mutation_threshold,
            visible_mutation_threshold=visible_mutation_threshold,
        )
