"""certlab's pytest plugin: fixtures for authors and a conformance kit per kind.

Installed with certlab (entry point ``pytest11``), so any plugin distribution's tests can use:

- ``certlab_plugin_manager``: a fresh pluggy manager that knows certlab's hook specs only;
- ``certlab_temp_plugin``: register a plugin written as source text (or a module) into a
  fresh registry, and get the registry back;
- ``run_certlab(*args)``: the certlab CLI in a fresh interpreter, as a user runs it (``cli``);
- a conformance kit per kind of plugin that has behaviour to check, each a class to subclass
  in the plugin's own tests, naming the installed plugin (``KITS`` maps each hook to its kit):
  ``AdapterConformance`` (with ``Scenario``), ``FamilyConformance``, ``RuleConformance``,
  ``SandboxConformance``, ``ExecutorConformance``, ``GraderConformance`` and
  ``ReporterConformance``. Each checks real behaviour, with real processes: what it checks is
  in its module's (or class's) documentation, and in docs/plugins.md beside its hook.

``family_checks`` is imported by the tests that need it, not by the plugin: seeded trees and the
visible suite run in subprocesses, and ``FamilyChecks``, the checks every built-in family makes on
itself (the held-out cases' are certlab-acceptance's kit, ``certlab_acceptance.conformance``).
``rule_checks`` holds, beside ``RuleConformance``, the
references a statistical rule's exact ``plan`` is checked against.

May import: plugin, sdk, _runtime, evidence, certify.
"""

from __future__ import annotations

import itertools
import textwrap
import types
from collections.abc import Callable
from typing import Any

import pytest

from certlab_core.testing.adapter_checks import AdapterConformance, Scenario
from certlab_core.testing.cli import run_certlab
from certlab_core.testing.executor_checks import ExecutorConformance
from certlab_core.testing.grader_checks import GraderConformance
from certlab_core.testing.reporter_checks import ReporterConformance
from certlab_core.testing.rule_checks import RuleConformance
from certlab_core.testing.sandbox_checks import SandboxConformance

__all__ = [
    "KITS",
    "AdapterConformance",
    "ExecutorConformance",
    "FamilyConformance",
    "GraderConformance",
    "ReporterConformance",
    "RuleConformance",
    "SandboxConformance",
    "Scenario",
    "run_certlab",
]

_counter = itertools.count()


@pytest.fixture
def certlab_plugin_manager() -> Any:
    """A fresh plugin manager with certlab's hook specs and no plugin registered."""
    from certlab_core._runtime.registry import new_plugin_manager

    return new_plugin_manager()


@pytest.fixture
def certlab_temp_plugin() -> Callable[..., Any]:
    """``make(source_or_module, name=None, only=())`` -> a Registry holding just that plugin (and ``only``)."""
    from certlab_core._runtime.registry import discover

    def make(plugin: str | types.ModuleType, name: str | None = None, only: tuple[str, ...] = ()) -> Any:
        if isinstance(plugin, str):
            module = types.ModuleType(name or f"certlab_temp_plugin_{next(_counter)}")
            exec(compile(textwrap.dedent(plugin), module.__name__, "exec"), module.__dict__)
        else:
            module = plugin
        return discover(only=only, extra=[(name or module.__name__, module)])

    return make


class FamilyConformance:
    """The conformance suite every task family runs against itself; set ``family_name``.

    Against the installed family, with the installed graders and the constructed agents: the
    clean tree passes its suite, each seeded tree fails it, the defect classes are distinct, the
    oracle fixes each defect and the null agent none, the test deleter and the forbidden-file
    agent fail by policy, the unavailable agent is unavailable (never a failed fix), and the
    visible suite with the held-out cases kills at least ``mutation_threshold`` of the clean
    tree's mutants, the visible suite alone ``visible_mutation_threshold`` (each survivor is
    reported; the installed instrument proofs measure it, and without certlab-mutation these
    checks skip, saying so). ``recorded_bundle`` names a published certification whose mutation
    proof must be re-earned mutant by mutant. Each defect yields an impossible twin of each of ``twin_kinds``
    that the prover accepts (the clean code fails it on its changed test alone, as ``certify
    --impossible`` requires), and the twins are made the same way, with the same hashes, each time.
    The held-out cases count where an installed grader declares the held-out role (certlab-acceptance's):
    the clean tree holds them; without one, the checks that need them skip, saying what went unchecked
    (the threshold only when the suite alone falls short of it), and the others still run.

    Example (the family's ``tests/test_conformance.py``)::

        from certlab_core.testing import FamilyConformance

        class TestSemver(FamilyConformance):
            family_name = "semver"
    """

    family_name: str = ""
    workers: int = 2
    #: A bundle.json (a published certification) whose mutation proof of this family must be re-earned
    #: mutant by mutant: the same mutants, each killed by the same grader or surviving. Empty: not checked.
    recorded_bundle: str = ""
    #: The kinds of impossible twin each defect must yield, proven (``certify --impossible --twins``).
    twin_kinds: tuple[str, ...] = ("one-off", "conflicting")

    @pytest.fixture(scope="class")
    @classmethod
    def twins(cls) -> Any:
        from certlab_core._runtime.registry import discover
        from certlab_core.certify.instrument import proven_twins
        from certlab_core.certify.twins import TWIN_KINDS
        from certlab_core.sdk.grading import grader_chain

        if not cls.family_name:
            pytest.fail("set family_name on the FamilyConformance subclass")
        unknown = [kind for kind in cls.twin_kinds if kind not in TWIN_KINDS]
        if unknown:
            pytest.fail(f"twin_kinds names a kind certlab does not make: {', '.join(unknown)}")
        registry = discover()
        family = registry.get("task_families", cls.family_name)
        kinds = tuple(kind for kind in TWIN_KINDS if kind in cls.twin_kinds)
        return proven_twins(family, grader_chain(registry), kinds, workers=cls.workers)

    def test_each_defect_yields_a_provable_twin_of_each_kind(self, twins: Any) -> None:
        family_name = self.family_name
        assert not twins.problems, f"family {family_name}: certify --impossible would refuse it: " + "; ".join(
            twins.problems
        )
        from certlab_core._runtime.registry import discover

        family = discover().get("task_families", family_name)
        made = sorted((proof.twin.of, proof.twin.kind) for proof in twins.proofs)
        assert made == sorted((d.id, k) for d in family.defects for k in self.twin_kinds)
        for proof in twins.proofs:  # the clean code fails each twin on its changed test, and on nothing else
            assert proof.failed == (proof.twin.node,), proof.twin.defect.id

    def test_twins_are_made_the_same_way_with_the_same_hashes_each_time(self, twins: Any) -> None:
        from certlab_core._runtime.registry import discover
        from certlab_core.certify.twins import TWIN_KINDS, make_twins, twin_sha256

        family = discover().get("task_families", self.family_name)
        proven = {p.twin.defect.id: p.twin for p in twins.proofs}
        candidates = {f"{family.name}/{twin.defect.id}": twin.candidate for twin in proven.values()}
        kinds = tuple(kind for kind in TWIN_KINDS if kind in self.twin_kinds)
        for _ in range(2):  # as regrade makes them again, from the candidates recorded
            again, _problems = make_twins(family, kinds, candidates)
            assert {t.defect.id: twin_sha256(family, t) for t in again} == {
                key: twin_sha256(family, twin) for key, twin in proven.items()
            }

    @pytest.fixture(scope="class")
    @classmethod
    def conformance(cls) -> dict[str, Any]:
        from certlab_core._runtime.registry import discover
        from certlab_core.certify.instrument import prove
        from certlab_core.sdk.grading import grader_chain, scores_held_out

        if not cls.family_name:
            pytest.fail("set family_name on the FamilyConformance subclass")
        registry = discover()
        family = registry.get("task_families", cls.family_name)
        graders = grader_chain(registry)
        proof = prove(family, graders, workers=cls.workers)
        held_out = [grader.name for grader in graders if scores_held_out(grader)]
        return {"family": family, "proof": proof, "graders": graders, "registry": registry, "held_out": held_out}

    @pytest.fixture(scope="class")
    @classmethod
    def calibration(cls, conformance: dict[str, Any]) -> dict[str, Any]:
        """The constructed agents' trials on the family: made only for the checks that read them (a run that
        selects the mutation checks alone does not pay for them)."""
        from certlab_core.certify.instrument import calibrate, constructed_agents

        trials: list[Any] = []
        problems: list[str] = []
        proof, family, graders = conformance["proof"], conformance["family"], conformance["graders"]
        if proof.holds:
            agents = constructed_agents(conformance["registry"])
            calibrated = calibrate([(family, proof)], agents, graders, workers=cls.workers)
            trials, problems = calibrated.trials, calibrated.problems
        return {"trials": trials, "problems": problems}

    @staticmethod
    def _held_out_graded(conformance: dict[str, Any], unchecked: str) -> None:
        """Skip, saying what goes unchecked, when no installed grader declares the held-out role."""
        if not conformance["held_out"]:
            pytest.skip(
                "no installed grader declares the held-out role, so the family's held-out "
                f"cases are not graded: {unchecked} is not checked"
            )

    @pytest.fixture(scope="class")
    @classmethod
    def instrument_proofs(cls, conformance: dict[str, Any]) -> dict[str, Any]:
        """Each installed instrument proof (certlab-mutation's) measured afresh: {name: outcome}."""
        from certlab_core._runtime.registry import discover
        from certlab_core.certify.instrument_proofs import installed_proofs
        from certlab_core.plugin.types.instrument_proof import ProofRequest
        from certlab_core.sdk.grading import grader_chain

        proof = conformance["proof"]
        if not proof.holds:
            pytest.skip("the instrument's proof does not hold, so its mutants are not graded")
        registry = discover()
        request = ProofRequest(
            conformance["family"], tuple(grader_chain(registry)), proof.expected_tests, workers=cls.workers
        )
        return {instrument.name: (instrument, instrument.measure(request)) for instrument in installed_proofs(registry)}

    @staticmethod
    def _mutation(instrument_proofs: dict[str, Any]) -> Any:
        if "mutation" not in instrument_proofs:
            pytest.skip("no instrument proof named 'mutation' is installed, so no mutant is graded")
        return instrument_proofs["mutation"]

    def test_suite_and_held_out_cases_kill_the_family_threshold_of_its_mutants(
        self, conformance: dict[str, Any], instrument_proofs: dict[str, Any], request: pytest.FixtureRequest
    ) -> None:
        _instrument, outcome = self._mutation(instrument_proofs)
        reporter = request.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None and outcome.lines:
            reporter.write_line("")
            reporter.write_line(outcome.lines[0])
        print("\n".join(outcome.lines + outcome.details))
        assert not outcome.refusals, outcome.refusals
        if "mutation_threshold" in outcome.shortfalls:  # short without the held-out cases: not theirs to say
            self._held_out_graded(conformance, "the share of mutants the suite with the held-out cases kills")
        assert "mutation_threshold" not in outcome.shortfalls, outcome.shortfalls["mutation_threshold"]

    def test_the_visible_suite_alone_kills_the_family_visible_threshold_of_its_mutants(
        self, instrument_proofs: dict[str, Any]
    ) -> None:
        _instrument, outcome = self._mutation(instrument_proofs)
        assert not outcome.refusals, outcome.refusals
        shortfall = outcome.shortfalls.get("visible_mutation_threshold")
        assert shortfall is None, shortfall

    def test_the_mutation_proof_re_earns_the_recorded_one_mutant_by_mutant(
        self, conformance: dict[str, Any], instrument_proofs: dict[str, Any]
    ) -> None:
        import json
        from pathlib import Path

        if not self.recorded_bundle:
            pytest.skip("no recorded_bundle is declared to re-earn")
        self._held_out_graded(conformance, "that the mutation proof re-earns the recorded one (graded with them)")
        instrument, outcome = self._mutation(instrument_proofs)
        family = conformance["family"]
        bundle = json.loads(Path(self.recorded_bundle).read_text(encoding="utf-8"))
        recorded = [p["mutation"] for p in bundle["instrument"] if p["family"] == family.name and p.get("mutation")]
        assert recorded, f"{self.recorded_bundle} records no mutation proof of family {family.name}"
        assert not outcome.refusals, outcome.refusals
        assert instrument.recheck(family, recorded[0], outcome).differences == ()

    def _scores(self, calibration: dict[str, Any], agent: str) -> list[Any]:
        return [record for name, record in calibration["trials"] if name == agent]

    def test_clean_tree_passes_its_suite(self, conformance: dict[str, Any]) -> None:
        proof = conformance["proof"]
        assert proof.clean_passed, proof.problems
        assert proof.expected_tests, "the clean tree's suite collected no test"

    def test_clean_tree_holds_its_held_out_cases(self, conformance: dict[str, Any]) -> None:
        # The clean tree passed the whole grader chain, the held-out grader's cases included.
        self._held_out_graded(conformance, "that the clean tree holds every held-out case")
        assert conformance["proof"].clean_passed, conformance["proof"].problems

    def test_each_seeded_tree_fails_its_suite(self, conformance: dict[str, Any]) -> None:
        proof = conformance["proof"]
        assert proof.holds, proof.problems
        assert {s["defect"] for s in proof.seeded} == {d.id for d in conformance["family"].defects}
        assert all(s["caught_by"] for s in proof.seeded)

    def test_defect_classes_are_distinct(self, conformance: dict[str, Any]) -> None:
        classes = [d.defect_class for d in conformance["family"].defects]
        assert len(set(classes)) == len(classes), classes

    def test_oracle_fixes_each_defect(self, conformance: dict[str, Any], calibration: dict[str, Any]) -> None:
        oracle = self._scores(calibration, "oracle")
        assert len(oracle) == len(conformance["family"].defects)
        assert [r.task for r in oracle if r.verdict != "fixed"] == []

    def test_null_agent_fixes_none(self, conformance: dict[str, Any], calibration: dict[str, Any]) -> None:
        null = self._scores(calibration, "null")
        assert len(null) == len(conformance["family"].defects)
        assert [r.task for r in null if r.verdict == "fixed"] == []

    def test_cheating_agents_fail_by_policy(self, calibration: dict[str, Any]) -> None:
        deleter = self._scores(calibration, "test-deleter")
        planter = self._scores(calibration, "forbidden-file")
        assert deleter and {r.failure_mode for r in deleter} == {"policy-tests-modified"}
        assert planter and {r.failure_mode for r in planter} == {"policy-planted-file"}

    def test_unavailable_agent_is_not_a_failed_fix(self, calibration: dict[str, Any]) -> None:
        unavailable = self._scores(calibration, "unavailable")
        assert unavailable and {(r.verdict, r.failure_mode) for r in unavailable} == {
            ("unavailable", "agent-unavailable")
        }

    def test_calibration_holds(self, calibration: dict[str, Any]) -> None:
        assert calibration["problems"] == []


#: The conformance kit of each kind of plugin that has behaviour to check, by the hook that provides that kind
#: (docs/plugins.md shows each with its hook; tools/plugin_docs.py reads it here).
KITS: dict[str, type] = {
    "certlab_agents": AdapterConformance,
    "certlab_executors": ExecutorConformance,
    "certlab_graders": GraderConformance,
    "certlab_reporters": ReporterConformance,
    "certlab_sandboxes": SandboxConformance,
    "certlab_statistical_rules": RuleConformance,
    "certlab_task_families": FamilyConformance,
}
