"""The JUnit and Markdown files run and gate write, through reporter plugins.

``--junit`` and ``--markdown`` name the ``junit`` and ``markdown`` reporters
(``certlab_reporters``, certlab-report-junit and certlab-report-markdown): the kernel has no
report format of its own. A reporter that is not installed is refused before any trial runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from certlab_core._runtime.registry import Registry
from certlab_core.plugin.errors import CertlabError, UsageError
from certlab_core.plugin.report import Report
from certlab_core.plugin.types.rule import StatisticalRule
from certlab_core.sdk.deadline import plugin_call, seconds_from_environment
from certlab_core.sdk.safe_io import write_output

#: How long a reporter may take to render one report (the text report of 100,000 trials takes about 4 s), unless
#: ``CERTLAB_REPORTER_RENDER_S`` says otherwise.
REPORTER_RENDER_S = 300.0
RENDER_ENV = "CERTLAB_REPORTER_RENDER_S"


def check_reporters(registry: Registry, wanted: Mapping[str, Path | None]) -> None:
    """Refuse, naming what to install, an option (``junit``: its path) whose reporter plugin is missing."""
    for name, path in wanted.items():
        if path is not None:
            try:
                registry.get("reporters", name)
            except UsageError as missing:
                raise UsageError(f"--{name} {path}: {missing.message}") from None


def write_report(folder: Path, name: str, path: Path, registry: Registry) -> None:
    """The full report of the run store ``folder``, rendered by the reporter ``name``, written to ``path``."""
    from certlab_core.report.reading import load_report

    try:
        report, rule = load_report(folder, registry, (1, 2, 4))
    except CertlabError as error:
        raise CertlabError(f"--{name} {path}: no report of {folder}: {error.message}", error.exit_code) from None
    write_output(path, rendered(registry, name, report, rule), f"--{name}", records=folder)


def rendered(registry: Registry, name: str, report: Report, rule: StatisticalRule | None) -> str:
    """``report`` as the reporter ``name`` renders it. A render that raises, runs past :data:`REPORTER_RENDER_S`
    or returns no text is one line naming the reporter and its distribution (exit 3), never a traceback."""
    reporter = registry.get("reporters", name)
    whose = registry.part_of("reporters", name, "render")
    seconds = seconds_from_environment(RENDER_ENV, REPORTER_RENDER_S, "a reporter may take, e.g. 300")
    text: str = plugin_call(
        whose, reporter.render, report, rule, seconds=seconds, wait_variable=RENDER_ENV, returns=(str,)
    )
    return text
