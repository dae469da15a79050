"""Services for plugin commands: stores, bundles, re-runs and replays."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attrs import frozen

from certlab_core.plugin.errors import UsageError
from certlab_core.plugin.types.sandbox import Containment
from certlab_core.plugin.types.services import CertifiedReplay, RecordedAnswer

if TYPE_CHECKING:
    from certlab_core._runtime.registry import Registry
    from certlab_core.certify.lab import TrialSpec
    from certlab_core.gate.descriptor import FaultDeclaration
    from certlab_core.gate.manifest import Manifest
    from certlab_core.gate.runner import Plan
    from certlab_core.gate.store import RunStore
    from certlab_core.plugin.types.services import BundleView, Services, StoreView

CHILD_MODULE = "certlab_core.cli.child"  # the fresh interpreter of child_argv
# How long building a trial's world to learn its agent's task may take.
WORLD_TIMEOUT_S = 120.0


def _fault_declaration(document: Mapping[str, Any]) -> FaultDeclaration:
    """A fault declaration as a manifest holds it, read back as the runner takes it."""
    from certlab_core.gate.descriptor import FaultDeclaration
    from certlab_core.gate.typed import parse

    declaration, problems = parse(FaultDeclaration, dict(document), "a fault declaration")
    if declaration is None:
        raise UsageError(problems[0])
    found: FaultDeclaration = declaration
    return found


@frozen
class _Store:
    """A ``StoreView`` over the gate's ``RunStore``."""

    store: RunStore
    document: Mapping[str, Any]

    @property
    def folder(self) -> Path:
        return self.store.folder

    @property
    def manifest(self) -> Mapping[str, Any]:
        return self.document

    def trial(self, trial_id: str, /) -> dict[str, Any]:
        from certlab_core.report.reading import trial_line

        return trial_line(self.store, trial_id)


@frozen
class _Bundle:
    """A ``BundleView`` over a certification's bundle.json."""

    folder: Path
    document: Mapping[str, Any]

    def trial(self, trial_id: str, /) -> Mapping[str, Any]:
        trials = {str(t.get("id")): t for t in self.document.get("trials") or () if isinstance(t, Mapping)}
        if trial_id not in trials:
            known = ", ".join(sorted(trials)[:5]) + (", ..." if len(trials) > 5 else "")
            raise UsageError(f"{self.folder} holds no trial {trial_id!r}; its trials are {known}")
        return trials[trial_id]


def _agent_task(manifest: Manifest, registry: Registry, seed: int) -> Any:
    """In a child: build the trial's world (no tool is called) and return the task its agent received."""
    from certlab_core.gate import boundary
    from certlab_core.gate.references import callable_reference
    from certlab_core.gate.runner import plan_run

    plan: Plan = plan_run(manifest, registry)
    builder = plan.world.build if plan.world is not None else None
    if builder is None:
        assert manifest.task.world is not None
        builder = callable_reference(manifest.task.world, manifest.descriptor_dir)
    instance = builder(json.loads(json.dumps(manifest.task.input)), seed)
    return boundary.to_json(instance.task)


def _certified_child(spec: TrialSpec, registry: Registry) -> Any:
    from certlab_core.certify.lab import run_trial
    from certlab_core.sdk.grading import grader_chain

    return run_trial(spec, grader_chain(registry))


class KernelServices:
    """The kernel's implementation of ``certlab_core.plugin.types.services.Services``, over one registry."""

    def __init__(self, registry: Registry | None = None) -> None:
        self._registry = registry
        # The manifests of the stores opened here, by seal: the document a store view shows, and the manifest it
        # was read as. A store written by an older certlab lacks fields added since, which the document shows at
        # their defaults, so its seal is the stored one and not that of the document.
        self._opened: dict[str, tuple[dict[str, Any], Manifest]] = {}

    def _manifest(self, document: Mapping[str, Any], source: str = "the manifest given") -> Manifest:
        """The manifest a document is: one of a store opened here, else checked as manifest.json is."""
        from certlab_core.gate.manifest import manifest_from_document

        opened = self._opened.get(str(document.get("seal")))
        if opened is not None and opened[0] == document:
            return opened[1]
        return manifest_from_document(dict(document), source)

    @property
    def registry(self) -> Registry:
        """The installed plugins: the command line's registry, else discovered on first need."""
        if self._registry is None:
            from certlab_core._runtime.registry import discover

            self._registry = discover()
        return self._registry

    def open_store(self, rundir: Path, /) -> StoreView:
        from certlab_core.gate.manifest import manifest_document
        from certlab_core.report.reading import open_store

        store = open_store(rundir)
        document = manifest_document(store.manifest)
        self._opened[store.manifest.seal] = (copy.deepcopy(document), store.manifest)
        return _Store(store, document)

    def open_bundle(self, folder: Path, /) -> BundleView:
        from certlab_core.certify.regrade import read_bundle

        return _Bundle(folder, read_bundle(folder))

    def check_manifest(self, manifest: Mapping[str, Any], source: str, /) -> None:
        self._manifest(manifest, source)

    def trial_identity(self, manifest: Mapping[str, Any], trial_id: str, /) -> str | None:
        from certlab_core.gate.schedule import key_of, trial_identity

        sealed = self._manifest(manifest)
        key = key_of(sealed, trial_id)
        return None if key is None else trial_identity(sealed, key)

    def failure_fingerprint(self, trial: Mapping[str, Any], twin: Mapping[str, Any] | None, /) -> str:
        from certlab_core.gate.events import failure_fingerprint

        return failure_fingerprint(trial, twin)[0]

    def judge(
        self, manifest: Mapping[str, Any], outcome: Mapping[str, Any], oracle: Mapping[str, Any] | None, /
    ) -> tuple[str, str | None, str | None]:
        from certlab_core.gate.classify import classify

        return classify(self._manifest(manifest), outcome, oracle, None)

    def recompute_decision(self, store: StoreView, /) -> dict[str, Any]:
        from certlab_core.report.reading import recompute_decision

        if not isinstance(store, _Store):
            raise TypeError("recompute_decision takes a store opened by open_store")
        return recompute_decision(store.store, self.registry)

    def agent_task(self, manifest: Mapping[str, Any], seed: int, /) -> Any:
        from certlab_core.plugin.errors import InstrumentError
        from certlab_core.sdk.forking import ForkedCallError, call_in_fork

        sealed = self._manifest(manifest)
        try:
            return call_in_fork(_agent_task, sealed, self.registry, seed, timeout=WORLD_TIMEOUT_S)
        except ForkedCallError as error:
            raise InstrumentError(
                f"building the trial's world to learn its task failed: {error.failure.summary}"
            ) from None

    def rerun_trial(
        self,
        manifest: Mapping[str, Any],
        trial_id: str,
        /,
        faults: Sequence[Mapping[str, Any]] | None = None,
    ) -> dict[str, Any]:
        from certlab_core.gate.runner import rerun_trial

        sealed = self._manifest(manifest)
        declared = None if faults is None else [_fault_declaration(f) for f in faults]
        return rerun_trial(sealed, trial_id, self.registry, faults=declared)

    def load_agent(self, reference: str, descriptor_dir: str | None, /) -> Callable[..., Any]:
        from certlab_core.gate.references import resolve

        agent: Callable[..., Any] = resolve(reference, descriptor_dir)
        return agent

    def replay_tools(self, answer: RecordedAnswer, tools: Sequence[str], /) -> Any:
        from certlab_core.gate import boundary
        from certlab_core.plugin.exceptions import ToolError

        def cross(kind: str, name: str, raw_args: Mapping[str, Any]) -> Any:
            event = answer(kind, name, boundary.to_json(raw_args))
            if event.get("status") == "error":
                error = event.get("error") or {}
                raise boundary.BOUNDARY_ERRORS.get(str(error.get("type")), ToolError)(str(error.get("message", "")))
            return json.loads(json.dumps(event.get("result")))

        def call_tool(name: str, args: Mapping[str, Any]) -> Any:
            return cross("tool", name, args)

        def decide(question: str, options: Sequence[str]) -> Any:
            return cross("decision", "decide", {"question": question, "options": [str(o) for o in options]})

        return boundary.Tools(call_tool, decide, tuple(tools))

    def evidence_containment(
        self, sandbox: str, /, hidden: Iterable[str] = (), installation_visible: bool = False
    ) -> Containment:
        from certlab_core.certify.regrade import evidence_code_containment

        return evidence_code_containment(self.registry, sandbox, tuple(hidden), installation_visible)

    def containment_line(self, containment: Containment, what: str, /) -> str:
        from certlab_core.certify.regrade import containment_line

        return containment_line(containment, what)

    def child_argv(self, function: str, /, *args: str) -> list[str]:
        import sys

        return [sys.executable, "-s", "-m", CHILD_MODULE, function, *args]

    def register_task(self, directory: Path, /) -> None:
        from certlab_core.certify.acceptance import register_experiment_task

        register_experiment_task(self.registry, directory)

    def replay_certified(
        self, bundle: BundleView, trial_id: str, /, sandbox: str = "auto", hidden: Sequence[str] = ()
    ) -> CertifiedReplay:
        from certlab_core.certify.contract import token_budget_of
        from certlab_core.certify.lab import Task, TrialSpec, trial_time_limit_s
        from certlab_core.sdk.forking import ForkedCallError, call_in_fork
        from certlab_core.sdk.grading import grader_chain
        from certlab_core.sdk.model_boundary import ModelBoundaryPlan, default_model_plan

        registry = self.registry
        trial = bundle.trial(trial_id)
        events = [e for e in ((trial.get("model") or {}).get("events") or ()) if isinstance(e, Mapping)]
        plan = default_model_plan(registry)
        if plan is None:
            raise UsageError(
                "replaying a model recording needs a model boundary; "
                + registry.providers.install_line("model_boundaries")
            )
        family = registry.get("task_families", str(trial.get("family")))
        defect_id = str(trial.get("task", "")).partition("/")[2]
        defect = next((d for d in family.defects if d.id == defect_id), None)
        if defect is None:
            raise UsageError(
                f"the installed family {family.name} has no defect {defect_id!r}; install the bundle's version"
            )
        containment = self.evidence_containment(sandbox, [str(bundle.folder.resolve()), *hidden])
        line = self.containment_line(containment, "the certification's agent")
        document = bundle.document
        agent = document.get("agent") or {}
        expected = next(
            (p.get("expected_tests") for p in document.get("instrument") or () if p.get("family") == family.name), ()
        )
        spec = TrialSpec(
            task=Task(family, defect),
            agent=registry.get("agents", str(agent.get("adapter"))),
            repeat=int(trial.get("repeat") or 1),
            agent_args=tuple(str(a) for a in agent.get("args") or ()),
            agent_timeout_s=float((document.get("settings") or {}).get("agent_timeout_s") or 600.0),
            expected_tests=tuple(expected or ()),
            # The recorded trial's token budget refuses the same call again (its tokens are the recorded ones).
            model_boundary=ModelBoundaryPlan(
                plan.boundary, replay=tuple(events), max_tokens=token_budget_of(document.get("settings"))
            ),
            containment=containment,
        )
        try:
            limit_s = trial_time_limit_s(spec.agent_timeout_s, grader_chain(registry))
            record = call_in_fork(_certified_child, spec, registry, timeout=limit_s, temp_prefix="certlab-trials-")
        except ForkedCallError as error:
            return CertifiedReplay(containment=line, failure=error.failure.summary)
        model = record.model or {}
        departure = model.get("departure")
        return CertifiedReplay(
            containment=line,
            verdict=record.verdict,
            failure_mode=record.failure_mode,
            served=int((model.get("replayed") or {}).get("served", 0)),
            departure=str(departure) if departure else None,
        )


def services_for(registry: Registry | None = None) -> Services:
    """The services a plugin's command gets, over the registry the command line discovered (else one of its own)."""
    return KernelServices(registry)
