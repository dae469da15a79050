"""Reporters: the ``certlab_reporters`` record and its render callable."""

from __future__ import annotations

from typing import Protocol

from attrs import field, frozen

from certlab_core.plugin.report import Report
from certlab_core.plugin.types.base import Record
from certlab_core.plugin.types.rule import StatisticalRule

#: The reporter ``certlab report`` uses without ``--format`` (certlab-report-text's plain text).
DEFAULT_REPORTER = "text"

# --------------------------------------------------------------------------- reporters


class Render(Protocol):
    """A reporter's ``render``: the whole file's text from the report model and the rule (None when not installed)."""

    def __call__(self, report: Report, rule: StatisticalRule | None, /) -> str: ...


@frozen
class Reporter(Record):
    """A report format: ``render(report, rule) -> str``, the whole file's text.

    ``report`` is a ``certlab_core.plugin.Report`` (the verdict, and per condition
    its bounds, arms, fault firings and failure clusters); ``rule`` is the experiment's
    ``StatisticalRule`` when it is installed, else None (a reporter that plots the rule's
    operating characteristic calls ``rule.plan``). ``suffix`` is the usual file ending
    (``.md``, ``.xml``, ``.html``).
    """

    name: str
    description: str
    suffix: str
    render: Render = field(eq=False, repr=False)
