"""The services a plugin's command gets to work on run stores and bundles.

A command that reads evidence (``certlab diff``, ``replay``) needs what the kernel's engines
know: how a store is checked, how a trial is re-run, how an ending is judged. It gets them
here, as protocols the kernel implements, and never imports the engines or the runtime. A
command receives them as the second positional parameter of its ``register``
(``register(app, services)``; a ``register(app)`` gets none): see ``Command``.

Manifests, trial lines and bundles are passed as the JSON documents the evidence holds
(manifest.json, a trials.jsonl line, bundle.json), so what a command reads and writes is the
evidence format itself, and the kernel checks a document whenever a service is given one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from attrs import frozen

from certlab_core.plugin.types.base import Record
from certlab_core.plugin.types.sandbox import Containment

#: What ``Services.replay_tools`` asks of a command for each call an agent makes: ``(kind, name,
#: args)``, with ``kind`` ``tool`` or ``decision`` and ``args`` as JSON, answered with a recorded
#: boundary event (``{"status": "ok", "result": ...}`` or ``{"status": "error", "error": {"type":
#: ..., "message": ...}}``). It may raise instead (a ``BaseException`` ends the agent's run).
RecordedAnswer = Callable[[str, str, Any], Mapping[str, Any]]


class StoreView(Protocol):
    """A gate run store, opened and checked (``Services.open_store``): its sealed manifest and its trial lines."""

    @property
    def folder(self) -> Path:
        """The run store's folder (``RUNDIR``)."""
        ...

    @property
    def manifest(self) -> Mapping[str, Any]:
        """The sealed manifest, checked, as this certlab reads manifest.json (a field added since at its default).

        The services take it, and any document equal to it, as the store's manifest.
        """
        ...

    def trial(self, trial_id: str, /) -> dict[str, Any]:
        """The trial's line (its last attempt), its seal checked; a ``UsageError`` for an id the run never ran."""
        ...


class BundleView(Protocol):
    """A certification's evidence bundle, opened and checked (``Services.open_bundle``)."""

    @property
    def folder(self) -> Path:
        """The certification's folder (or its bundle.json, as it was named)."""
        ...

    @property
    def document(self) -> Mapping[str, Any]:
        """bundle.json, its schema and seal checked."""
        ...

    def trial(self, trial_id: str, /) -> Mapping[str, Any]:
        """The trial's record; a ``UsageError`` naming some of the bundle's trials for an id it does not hold."""
        ...


@frozen(kw_only=True)
class CertifiedReplay(Record):
    """A certification's trial re-run offline against its recorded model calls (``Services.replay_certified``).

    ``containment`` is the line saying how the agent's code was contained; ``failure`` is why
    the re-run process failed (then the other fields are empty); else ``verdict`` and
    ``failure_mode`` are the fresh grade, ``served`` how many recorded model calls the model
    boundary answered, and ``departure`` the call where the agent left the recording, if it did.
    """

    containment: str
    failure: str | None = None
    verdict: str | None = None
    failure_mode: str | None = None
    served: int = 0
    departure: str | None = None


class Services(Protocol):
    """What the kernel does for a plugin's command on stores and bundles; the second argument of its ``register``.

    Each method raises the contract's errors: a ``UsageError`` (exit 4) for what the user
    asked wrongly, an ``InstrumentError`` (exit 3) for damaged evidence.
    """

    def open_store(self, rundir: Path, /) -> StoreView:
        """The run store in ``rundir``, its manifest's seal and schedule checked."""
        ...

    def open_bundle(self, folder: Path, /) -> BundleView:
        """The certification in ``folder`` (its folder, or its bundle.json), its schema and seal checked."""
        ...

    def check_manifest(self, manifest: Mapping[str, Any], source: str, /) -> None:
        """Check a manifest document as manifest.json is checked (seal, shape, schedule): an ``InstrumentError``
        that names ``source`` when it does not hold. A command checks one it built before handing it on."""
        ...

    def trial_identity(self, manifest: Mapping[str, Any], trial_id: str, /) -> str | None:
        """The identity hash ``manifest`` gives the trial ``trial_id``; None when it schedules no such trial."""
        ...

    def failure_fingerprint(self, trial: Mapping[str, Any], twin: Mapping[str, Any] | None, /) -> str:
        """A failed trial's fingerprint (failure mode and first diverging event from its twin), as the report has it."""
        ...

    def judge(
        self, manifest: Mapping[str, Any], outcome: Mapping[str, Any], oracle: Mapping[str, Any] | None, /
    ) -> tuple[str, str | None, str | None]:
        """``(outcome, failure_mode, error)`` of a tool-world trial's ending, as the runner decides it.

        ``outcome`` holds ``agent`` (``status``, ``exit_code``, ``detail``), ``error``,
        ``budget_exceeded`` and ``uncaught_tool_error``; ``oracle`` is the oracle's verdict
        (``{"passed": ...}``), None when it did not judge.
        """
        ...

    def recompute_decision(self, store: StoreView, /) -> dict[str, Any]:
        """The store's decision document computed afresh from its lines by its sealed rule (decision.json's content)."""
        ...

    def agent_task(self, manifest: Mapping[str, Any], seed: int, /) -> Any:
        """The task a tool-world trial's agent received with ``seed``, as JSON (its world built in a child)."""
        ...

    def rerun_trial(
        self,
        manifest: Mapping[str, Any],
        trial_id: str,
        /,
        faults: Sequence[Mapping[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Run one scheduled trial again for real, in fresh processes: the line it would record (appended nowhere).

        ``faults`` (fault declarations as the manifest holds them) replace its condition's.
        """
        ...

    def load_agent(self, reference: str, descriptor_dir: str | None, /) -> Callable[..., Any]:
        """The Python agent ``module:function`` names, imported as the runner imports it (descriptor folder first)."""
        ...

    def replay_tools(self, answer: RecordedAnswer, tools: Sequence[str], /) -> Any:
        """The tools object a tool-world agent is given, each call answered by ``answer`` from a recording.

        A recorded result is returned to the agent as JSON; a recorded error is raised as the
        tool boundary's exception of that type (``ToolError`` for a type it does not know).
        """
        ...

    def evidence_containment(
        self, sandbox: str, /, hidden: Iterable[str] = (), installation_visible: bool = False
    ) -> Containment:
        """The containment for code evidence holds, run again (``--sandbox``: auto, bwrap or none).

        Every installed family's clean tree and held-out cases are hidden, and ``hidden``;
        certlab's own installation too, unless ``installation_visible``.
        """
        ...

    def containment_line(self, containment: Containment, what: str, /) -> str:
        """The line a reader prints: it ran the code ``what`` holds, and how it was contained."""
        ...

    def child_argv(self, function: str, /, *args: str) -> list[str]:
        """The command line of a fresh Python interpreter that calls ``function(services, *args)`` and exits with
        the number it returns: ``function`` is ``module:name``, and ``services`` are the child's own.

        For a command's code that must run in a new process, such as inside a sandbox
        (``run_contained``): the child starts without the user's site folder (``-s``), and
        discovers the installed plugins only when a service needs them.
        """
        ...

    def register_task(self, directory: Path, /) -> None:
        """Make the user task in an experiment folder one of the installed families, for the services that follow
        (``replay_certified`` of a certification made on it); nothing when the folder holds no user task."""
        ...

    def replay_certified(
        self, bundle: BundleView, trial_id: str, /, sandbox: str = "auto", hidden: Sequence[str] = ()
    ) -> CertifiedReplay:
        """Re-run a certification's trial offline: its adapter in a fresh work copy, every model call answered from the
        trial's recording, then graded, contained as the certification ran it.

        The certification's folder is out of the agent's reach, and ``hidden`` (a user task's
        experiment folder). A ``UsageError`` when the trial's family, defect or a model boundary
        is not installed.
        """
        ...
