"""Without certlab-mutation installed, certify records the mutation proof as not measured and still certifies.

The kernel proves each family by its seeded defects itself; the mutation proof comes through the
``certlab_instrument_proofs`` hook. A registry without the plugin (as ``CERTLAB_PLUGINS`` leaves
it out) records the same ``{"measured": false, "why": ...}`` document ``--no-mutants`` writes,
with a why that says what to install; the floors that need the proof are refused before anything
runs, and a recorded proof cannot be re-earned without it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from certlab_core._runtime.registry import Registry, discover
from certlab_core.certify.certification import CertifyOptions, certify
from certlab_core.certify.contract import render_contract
from certlab_core.plugin import TaskFamily, UsageError
from certlab_core.sdk.grading import grader_chain

WITHOUT_MUTATION = ("intervals", "calibration", "policy", "suite", "acceptance", "sandbox-none")
WHY = "certlab-mutation is not installed (pip install certlab-mutation)"


@pytest.fixture(scope="module")
def without_mutation() -> Registry:
    return discover(only=WITHOUT_MUTATION)


def certified(registry: Registry, **options: Any) -> tuple[dict[str, Any], int, list[str]]:
    said: list[str] = []
    settings = CertifyOptions(families=("intervals",), agent="null", sandbox="none", **options)
    result = certify(registry, settings, said.append)
    return result.bundle, result.exit_code, said


def test_certify_records_the_mutation_proof_not_measured_naming_what_to_install(without_mutation: Registry) -> None:
    bundle, exit_code, said = certified(without_mutation)
    assert exit_code == 0, said
    (proof,) = bundle["instrument"]
    assert proof["holds"] is True
    assert proof["mutation"] == {"measured": False, "why": WHY, "warnings": [], "refusals": []}
    assert f"mutants intervals: not measured ({WHY})" in said
    assert f"mutation proof: not measured ({WHY})" in render_contract(bundle, without_mutation)


def test_no_mutants_without_the_plugin_records_its_own_why(without_mutation: Registry) -> None:
    bundle, exit_code, said = certified(without_mutation, mutants=False)
    assert exit_code == 0, said
    (proof,) = bundle["instrument"]
    assert proof["mutation"] == {"measured": False, "why": "certify --no-mutants", "warnings": [], "refusals": []}
    assert "mutants intervals: not measured (--no-mutants)" in said


@pytest.mark.parametrize("flag", ["min_mutation_score", "min_visible_mutation_score"])
def test_a_floor_that_needs_the_mutation_proof_is_refused_naming_what_to_install(
    without_mutation: Registry, flag: str
) -> None:
    with pytest.raises(UsageError, match=r"needs the mutation proof: .*pip install certlab-mutation"):
        certified(without_mutation, **{flag: 0.5})


def test_regrade_mutants_of_a_recorded_proof_is_refused_naming_what_to_install(without_mutation: Registry) -> None:
    from certlab_core.certify.instrument_proofs import recheck_bundle

    family = without_mutation.get(TaskFamily, "intervals")
    bundle = {"instrument": [{"family": "intervals", "mutation": {"measured": True, "mutants": 3, "score": 1.0}}]}
    progress: Callable[[str], None] = lambda _line: None  # noqa: E731
    graders = grader_chain(without_mutation)
    with pytest.raises(UsageError, match="records a mutation proof, and certlab-mutation is not installed"):
        recheck_bundle(without_mutation, bundle, {"intervals": family}, graders, {"intervals": ()}, 1, progress)


def _never_returns(_request: Any) -> Any:
    while True:
        time.sleep(0.05)


def _outcome(**fields: Any) -> Callable[[Any], Any]:
    from certlab_core.plugin.types.instrument_proof import ProofOutcome

    return lambda _request: ProofOutcome(**fields)


@pytest.mark.parametrize(
    ("measure", "said"),
    [
        (lambda _request: 1 / 0, "measure raised ZeroDivisionError: division by zero"),
        (lambda _request: {"score": 1.0}, "measure returned dict, not a ProofOutcome"),
        # Before: a measure that never returned hung certify and prove for good, and a document that is no JSON was
        # "internal error: TypeError" when the bundle was written. A line that is no text breaks the type, as a dict.
        (_never_returns, "measure did not return within 1 s (CERTLAB_PROOF_S sets the wait)"),
        (
            _outcome(document={"when": object()}),
            "measure returned a document the bundle cannot hold (Object of type object is not JSON serializable); "
            "it must be JSON",
        ),
        (_outcome(document={}, lines=(b"bytes",)), "measure returned a ProofOutcome whose lines are not all texts"),
    ],
    ids=["raises", "dict", "hangs", "no-json", "bytes-line"],
)
def test_an_instrument_proof_that_raises_hangs_or_returns_the_wrong_type_is_named_in_one_line(
    without_mutation: Registry, measure: Callable[[Any], Any], said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before, certify, prove and regrade met a third party's broken proof as a traceback.
    from certlab_core.certify.instrument_proofs import measured
    from certlab_core.plugin import InstrumentError
    from certlab_core.plugin.types.instrument_proof import InstrumentProof, ProofRequest

    monkeypatch.setenv("CERTLAB_PROOF_S", "1")

    proof = InstrumentProof(
        name="odd", description="odd", measure=measure, recheck=None, check_minimums=None, check_fixed_tree=None
    )  # type: ignore[arg-type]
    family = without_mutation.get(TaskFamily, "intervals")
    with pytest.raises(InstrumentError) as refused:
        measured(proof, ProofRequest(family, (), ()))
    assert str(refused.value) == f"the instrument proof odd's {said}"


def odd_proof(**methods: Any) -> Any:
    from certlab_core.plugin.types.instrument_proof import InstrumentProof

    chosen: dict[str, Any] = {"measure": None, "recheck": None, "check_minimums": None, "check_fixed_tree": None}
    chosen.update(methods)
    return InstrumentProof(name="odd", description="odd", **chosen)


def test_a_proofs_recheck_that_raises_or_returns_the_wrong_type_is_named_in_one_line(
    without_mutation: Registry,
) -> None:
    # Before, regrade --mutants met a third party's broken recheck as a traceback.
    from certlab_core.certify.instrument_proofs import rechecked
    from certlab_core.plugin import InstrumentError
    from certlab_core.plugin.types.instrument_proof import ProofOutcome

    family = without_mutation.get(TaskFamily, "intervals")
    for recheck, said in (
        (lambda *_: 1 / 0, "recheck raised ZeroDivisionError: division by zero"),
        (lambda *_: "all consistent", "recheck returned str, not a ProofRecheck"),
    ):
        with pytest.raises(InstrumentError) as refused:
            rechecked(odd_proof(recheck=recheck), family, {}, ProofOutcome({}))
        assert str(refused.value) == f"the instrument proof odd's {said}"


def test_a_proofs_check_fixed_tree_that_raises_or_answers_the_wrong_shape_is_named_in_one_line(
    without_mutation: Registry,
) -> None:
    from certlab_core.certify.instrument_proofs import fixed_tree_checked
    from certlab_core.plugin import InstrumentError
    from certlab_core.plugin.types.instrument_proof import ProofRequest

    request = ProofRequest(without_mutation.get(TaskFamily, "intervals"), (), ())
    for check, said in (
        (lambda _request: [][1], "check_fixed_tree raised IndexError: list index out of range"),
        (lambda _request: (["a line"], None), "check_fixed_tree returned tuple, not two lists of texts"),
        (lambda _request: ["a line"], "check_fixed_tree returned list, not two lists of texts"),
    ):
        with pytest.raises(InstrumentError) as refused:
            fixed_tree_checked(odd_proof(check_fixed_tree=check), request)
        assert str(refused.value) == f"the instrument proof odd's {said}"
    assert fixed_tree_checked(odd_proof(check_fixed_tree=lambda _r: (["held"], [])), request) == (["held"], [])


def test_a_proofs_check_minimums_that_crashes_is_named_and_its_refusal_goes_on_as_it_is() -> None:
    from certlab_core.certify.instrument_proofs import plugin_call
    from certlab_core.plugin import InstrumentError

    def refuses(minimum: float | None, _visible: float | None) -> None:
        raise UsageError(f"--min-mutation-score {minimum} is not between 0 and 1")

    proof = odd_proof(check_minimums=refuses)
    with pytest.raises(UsageError, match="is not between 0 and 1"):
        plugin_call(proof, "check_minimums", proof.check_minimums, 2.0, None)
    crashes = odd_proof(check_minimums=lambda *_: {}["floor"])
    with pytest.raises(InstrumentError, match=r"^the instrument proof odd's check_minimums raised KeyError: 'floor'$"):
        plugin_call(crashes, "check_minimums", crashes.check_minimums, 0.5, None)
