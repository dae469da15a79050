"""Task sources: what reads an experiment directory into a TaskFamily.

A user's own task is a folder (an experiment directory) that certify's ``--task DIR``, the
A/B gate's descriptor folder and regrade's ``--task DIR`` name. The kernel reads no such
folder itself: it asks each installed :class:`TaskSource` whether it ``recognises`` the
folder, and the one that does reads it into a family with ``stage`` (certlab-acceptance's
``user-task`` reads ``certlab.yaml``, ``fixture/``, ``tests/`` and ``cases/``). With no source installed,
or none that recognises the folder, the command refuses it in one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from attrs import field, frozen

from certlab_core.plugin.types.base import Record
from certlab_core.plugin.types.family import TaskFamily


class RecognisesTask(Protocol):
    """Whether ``directory`` holds a task this source reads (cheap: it looks, it stages nothing, it never raises).

    A folder that holds the source's task but is malformed is recognised: ``stage`` then says what is wrong.
    """

    def __call__(self, directory: Path, /) -> bool: ...


class StageTask(Protocol):
    """Read the task in ``directory`` and build its issued tree below ``dest`` (a new folder); return its family.

    A missing part or a bad setting is one UsageError naming the file and the fix.
    """

    def __call__(self, directory: Path, dest: Path, /) -> TaskFamily: ...


@frozen
class TaskSource(Record):
    """A kind of user task: ``recognises(directory)`` says whether it reads the folder, ``stage`` reads it."""

    name: str
    description: str
    recognises: RecognisesTask = field(eq=False, repr=False)
    stage: StageTask = field(eq=False, repr=False)
