"""The instrument's proof and calibration measured earlier on the same inputs are reused, and said so.

A second certification of the same family, or of a task of one's own, reuses its proof, its
impossible twins' proofs and every constructed agent's trial (the bundle marks them, the contract says so,
``--fresh-instrument`` measures them again); an entry that is hostile, foreign, a proof that
does not hold or a trial that misses its agent's expectation is measured again, never an
error and never a failed calibration; and each input of a proof or a trial moves its key.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import attrs
import pytest

from certlab_core._runtime.registry import Registry
from certlab_core.certify.certification import CertifyOptions, certify
from certlab_core.certify.contract import render_contract
from certlab_core.certify.instrument import proven_twins
from certlab_core.certify.lab import SeededProof, Task, TrialSpec
from certlab_core.certify.reuse import (
    KIND,
    PROOF_KIND,
    TWINS_SCHEMA,
    proof_key,
    reused_or_proven,
    reused_or_proven_twins,
    trial_key,
    twins_key,
)
from certlab_core.certify.twins import ProvenTwins
from certlab_core.plugin.types.sandbox import Containment
from certlab_core.sdk.grading import grader_chain
from certlab_core.sdk.measured_cache import CACHE_VARIABLE, code_digest
from certlab_core.testing import run_certlab

REUSED_SAID = "measured earlier on the same inputs, reused from certlab's cache"


def certified(registry: Registry, **options: Any) -> tuple[dict[str, Any], int, list[str]]:
    said: list[str] = []
    settings = CertifyOptions(
        families=("intervals",), agent="oracle", sandbox="none", mutants=False, workers=2, **options
    )
    result = certify(registry, settings, said.append)
    return result.bundle, result.exit_code, said


def outcomes(bundle: dict[str, Any]) -> list[tuple[str, str, str, str | None]]:
    return [(t["agent"], t["id"], t["verdict"], t["failure_mode"]) for t in bundle["calibration"]["trials"]]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def first(registry: Registry, cache: Path) -> dict[str, Any]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_VARIABLE, str(cache))
        bundle, exit_code, said = certified(registry)
    assert exit_code == 0, said
    return bundle


def test_a_second_certification_reuses_every_calibration_trial_and_the_bundle_and_contract_say_so(
    registry: Registry, cache: Path, first: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "reused" not in first["calibration"]  # measured: the bundle's shape is as before
    assert "reused" not in first["instrument"][0]
    assert len(list((cache / PROOF_KIND).glob("*.json"))) == 1
    kept = sorted((cache / KIND).glob("*.json"))
    assert len(kept) == len(first["calibration"]["trials"])  # each trial met its expectation, so each is kept
    monkeypatch.setenv(CACHE_VARIABLE, str(cache))

    bundle, exit_code, said = certified(registry)

    assert exit_code == 0
    trials = first["calibration"]["trials"]
    assert outcomes(bundle) == outcomes(first)
    assert bundle["calibration"]["reused"] == [{"agent": t["agent"], "id": t["id"]} for t in trials]
    assert f"calibrate: {len(trials)} of {len(trials)} trials {REUSED_SAID}" in "\n".join(said)
    assert bundle["instrument"][0]["reused"] is True
    assert [p["expected_tests"] for p in bundle["instrument"]] == [p["expected_tests"] for p in first["instrument"]]
    assert [p["seeded"] for p in bundle["instrument"]] == [p["seeded"] for p in first["instrument"]]
    assert "all 6 seeded defects are caught (measured earlier on the same inputs, reused" in "\n".join(said)
    contract = render_contract(bundle, registry)
    assert f"{len(trials)} of these {len(trials)} calibration trials were measured earlier" in contract
    assert "each of the 6 seeded trees fails them (measured earlier on the same inputs, reused" in contract
    assert bundle["summary"]["fixed"] == bundle["summary"]["scheduled"] == 6  # the agent's own trials always run


def test_a_task_of_ones_own_is_reused_too_and_fresh_instrument_measures_it_again(tmp_path: Path) -> None:
    env = {**os.environ, CACHE_VARIABLE: str(tmp_path / "cache")}
    assert run_certlab("init-task", str(tmp_path / "task"), env=env).returncode == 0

    def certify_task(out: str, *more: str) -> tuple[dict[str, Any], str]:
        done = run_certlab(
            "certify", "--task", str(tmp_path / "task"), "-a", "null", "--sandbox", "none", "--impossible",
            "-o", str(tmp_path / out), *more, env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return json.loads((tmp_path / out / "bundle.json").read_text()), done.stderr

    first, said = certify_task("first")
    assert "reused" not in first["instrument"][0] and "reused" not in first["calibration"]
    assert not any("reused" in twin for twin in first["impossible"]["twins"])
    assert "measured earlier" not in said
    again, said = certify_task("again")
    assert (
        again["instrument"][0]["reused"] is True
        and again["instrument"][0]["seeded"] == first["instrument"][0]["seeded"]
    )
    calibrated = len(first["calibration"]["trials"])
    assert len(again["calibration"]["reused"]) == calibrated and calibrated > 4  # the twin's trials too
    assert f"calibrate: {calibrated} of {calibrated} trials {REUSED_SAID}" in said
    assert "the fixture as issued fails its grading" in said and f"({REUSED_SAID})" in said
    # the twin's proof: said, marked on the twin, counted in the contract, and the twin itself the same
    assert f"the tree as issued fails each on its changed test ({REUSED_SAID})" in said
    (twin,) = again["impossible"]["twins"]
    assert twin.pop("reused") is True and [twin] == first["impossible"]["twins"]
    contract = (tmp_path / "again" / "CONTRACT.md").read_text()
    assert f"({REUSED_SAID.capitalize()}.)" in contract
    assert f"1 of 1 twins proven: the clean code fails each on its changed test alone (1 {REUSED_SAID})." in contract
    fresh, said = certify_task("fresh", "--fresh-instrument")
    assert "reused" not in fresh["instrument"][0] and "reused" not in fresh["calibration"]
    assert not any("reused" in twin for twin in fresh["impossible"]["twins"])
    assert "measured earlier" not in said and "measured earlier" not in (tmp_path / "fresh" / "CONTRACT.md").read_text()
    assert outcomes(fresh) == outcomes(again) == outcomes(first)


def test_a_hostile_foreign_or_missed_entry_is_measured_again_never_an_error(
    registry: Registry, first: dict[str, Any], cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = tmp_path / "cache"
    (mine / KIND).mkdir(parents=True)
    kept = sorted((cache / KIND).glob("*.json"))
    for entry in kept:
        (mine / KIND / entry.name).write_bytes(entry.read_bytes())
    by_agent: dict[str, list[Path]] = {}
    for entry in mine.joinpath(KIND).glob("*.json"):
        document = json.loads(entry.read_text())
        by_agent.setdefault(document["trial"]["verdict"] + " " + str(document["trial"]["failure_mode"]), []).append(
            entry
        )
    fixed, failed = by_agent["fixed None"], by_agent["not-fixed suite-failed"]
    # garbage; a FIFO (reading it must not hang); a symlink to a trial kept elsewhere; another trial's record under
    # this key; a null agent's record edited to say fixed (it would miss the null agent's expectation)
    fixed[0].write_text("{not json")
    fixed[1].unlink()
    os.mkfifo(fixed[1])
    fixed[2].unlink()
    fixed[2].symlink_to(kept[0])
    fixed[3].write_bytes(fixed[4].read_bytes())
    edited = json.loads(failed[0].read_text())
    edited["trial"].update(verdict="fixed", failure_mode=None)
    failed[0].write_text(json.dumps(edited))
    # a number where the trial's diff (text) belongs: cattrs would take it, as "5"
    loose = json.loads(fixed[5].read_text())
    loose["trial"]["diff"] = 5
    fixed[5].write_text(json.dumps(loose))
    # the family's proof kept with a problem (a proof that does not hold is proven again, never reused)
    (proof,) = (cache / PROOF_KIND).glob("*.json")
    (mine / PROOF_KIND).mkdir()
    document = json.loads(proof.read_text())
    document["proof"]["problems"] = ["defect x is not caught"]
    (mine / PROOF_KIND / proof.name).write_text(json.dumps(document))
    monkeypatch.setenv(CACHE_VARIABLE, str(mine))

    bundle, exit_code, said = certified(registry)

    assert exit_code == 0, said
    assert "reused" not in bundle["instrument"][0] and bundle["instrument"][0]["holds"]
    assert json.loads((mine / PROOF_KIND / proof.name).read_text())["proof"]["problems"] == []  # proven and kept
    assert outcomes(bundle) == outcomes(first)  # every hostile entry was measured again, as it was measured first
    assert not bundle["calibration"]["problems"]
    total = len(first["calibration"]["trials"])
    assert len(bundle["calibration"]["reused"]) == total - 6
    assert f"calibrate: {total - 6} of {total} trials {REUSED_SAID}" in "\n".join(said)


def test_each_input_of_a_proof_or_a_calibration_trial_moves_its_key(registry: Registry) -> None:
    family = registry.get("task_families", "intervals")
    agents = registry.all("agents")
    graders = grader_chain(registry)
    spec = TrialSpec(task=Task(family, family.defects[0]), agent=agents["oracle"], repeat=1)
    key = trial_key(spec, graders)
    assert key is not None and key == trial_key(attrs.evolve(spec), graders)
    moved = [
        trial_key(attrs.evolve(spec, task=Task(family, family.defects[1])), graders),
        trial_key(attrs.evolve(spec, agent=agents["null"]), graders),
        trial_key(attrs.evolve(spec, repeat=2), graders),
        trial_key(attrs.evolve(spec, agent_args=("--flag",)), graders),
        trial_key(attrs.evolve(spec, expected_tests=("tests/test_intervals.py::test_one",)), graders),
        trial_key(attrs.evolve(spec, agent_timeout_s=5.0), graders),
        trial_key(attrs.evolve(spec, impossible=True), graders),
        trial_key(spec, graders[:-1]),
        trial_key(attrs.evolve(spec, task=Task(attrs.evolve(family, version="9.9.9"), family.defects[0])), graders),
    ]
    assert None not in moved and len({key, *moved}) == len(moved) + 1
    # a contained trial, one behind a model boundary or with a seed is never the harness's calibration: not keyed
    assert trial_key(attrs.evolve(spec, containment=Containment()), graders) is None
    assert trial_key(attrs.evolve(spec, seed=7), graders) is None
    proof = proof_key(family, graders, None)
    proofs_moved = [
        proof_key(family, graders[:-1], None),
        proof_key(attrs.evolve(family, version="9.9.9"), graders, None),
        proof_key(attrs.evolve(family, defects=family.defects[:-1]), graders, None),
        proof_key(attrs.evolve(family, test_paths=("tests/",)), graders, None),
    ]
    assert proof is not None and proof == proof_key(family, graders, None) and proof != key
    assert None not in proofs_moved and len({proof, *proofs_moved}) == len(proofs_moved) + 1


def test_a_kept_proof_is_reused_only_while_it_is_this_familys_and_holds(
    registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path))
    family = registry.get("task_families", "intervals")
    graders = grader_chain(registry)
    seeded = tuple(
        {"defect": d.id, "defect_class": d.defect_class, "caught_by": "suite-failed"} for d in family.defects
    )
    made = SeededProof(family="intervals", clean_passed=True, expected_tests=("t.py::a",), seeded=seeded)
    proved: list[SeededProof] = []

    def prove_now() -> SeededProof:
        proved.append(made)
        return made

    assert reused_or_proven(family, graders, None, prove_now) == (made, False)
    assert reused_or_proven(family, graders, None, prove_now) == (made, True) and len(proved) == 1
    entry = tmp_path / PROOF_KIND / f"{proof_key(family, graders, None)}.json"
    kept = json.loads(entry.read_text())
    for hostile in (
        {**kept["proof"], "seeded": [1]},
        {**kept["proof"], "seeded": [["defect", "clamp-to-end"]]},
        {**kept["proof"], "seeded": kept["proof"]["seeded"][:-1]},
        {**kept["proof"], "family": "ledger"},
        {**kept["proof"], "problems": ["defect x is not caught"]},
        {**kept["proof"], "expected_tests": "t.py::a"},  # cattrs would read it as its letters
        {**kept["proof"], "family": 7},
        "not a proof",
    ):
        entry.write_text(json.dumps({**kept, "proof": hostile}))
        assert reused_or_proven(family, graders, None, prove_now) == (made, False), hostile  # proven again
        assert json.loads(entry.read_text()) == kept  # and kept again
    # past the caps of every document certlab reads: over 16 MB, nested deeper than 200 levels
    for oversized in (json.dumps({**kept, "padding": "x" * (17 << 20)}), "[" * 100_000 + "]" * 100_000):
        entry.write_text(oversized)
        assert reused_or_proven(family, graders, None, prove_now) == (made, False)
        assert json.loads(entry.read_text()) == kept
    failing = attrs.evolve(made, problems=("defect x is not caught",))
    entry.unlink()
    assert reused_or_proven(family, graders, None, lambda: failing) == (failing, False)
    assert not entry.exists()  # a proof that does not hold is never kept


def test_a_callable_is_keyed_on_its_package_or_a_lone_modules_own_file(tmp_path: Path) -> None:
    def load(path: Path) -> object:
        spec = importlib.util.spec_from_file_location(f"probe_{path.parent.name}_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.run  # type: ignore[attr-defined]

    package, site = tmp_path / "pkg", tmp_path / "site"
    package.mkdir()
    site.mkdir()
    (package / "__init__.py").write_text("")
    for folder in (package, site):
        (folder / "agent.py").write_text("def run():\n    return 1\n")
        (folder / "beside.py").write_text("X = 1\n")
    in_package, lone = code_digest(load(package / "agent.py")), code_digest(load(site / "agent.py"))
    for folder in (package, site):
        (folder / "beside.py").write_text("X = 2\n")
    # a module beside it in its package is its code; one installed beside a lone module is not (site-packages)
    assert code_digest(load(package / "agent.py")) != in_package
    assert code_digest(load(site / "agent.py")) == lone
    (site / "agent.py").write_text("def run():\n    return 2\n")
    assert code_digest(load(site / "agent.py")) != lone


def test_a_kept_twin_is_reused_only_if_it_is_the_twin_the_family_makes_now_and_every_one_holds(
    registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path / "cache"))
    family = registry.get("task_families", "intervals")
    graders = grader_chain(registry)
    proven: list[ProvenTwins] = []

    def prove_now() -> ProvenTwins:
        if not proven:
            proven.append(proven_twins(family, graders, ("one-off",)))
        return proven[-1]

    def reuse() -> tuple[ProvenTwins, bool]:
        return reused_or_proven_twins(family, graders, None, ("one-off",), None, prove_now)

    made, reused = reuse()
    assert not reused and not made.problems and len(made.proofs) == 6
    assert reuse() == (made, True)
    (kept,) = (tmp_path / "cache" / PROOF_KIND).glob("*.json")
    document = json.loads(kept.read_text())
    assert document["schema"] == TWINS_SCHEMA
    # each twin must be the one the family makes now (its contradicted value, its candidate assertion), one per
    # defect and kind, for this family, and each proof must hold: anything else is proven again and kept afresh
    for edit in (
        lambda twins: twins["proofs"][0]["twin"].update(contradicted="999"),
        lambda twins: twins["proofs"][1]["twin"].update(candidate=1),
        lambda twins: twins["proofs"][2].update(problems=["refused"]),
        lambda twins: twins["proofs"][3].update(family="ledger"),
        lambda twins: twins.update(proofs=twins["proofs"][:-1]),
        lambda twins: twins.update(proofs=[*twins["proofs"], twins["proofs"][0]]),
        lambda twins: twins["proofs"][4]["twin"].update(line="12"),
    ):
        hostile = json.loads(json.dumps(document))
        edit(hostile["twins"])
        kept.write_text(json.dumps(hostile))
        assert reuse() == (made, False), hostile["twins"]["proofs"][:2]
        assert json.loads(kept.read_text()) == document
    # twins that do not all hold are never kept
    refused = attrs.evolve(made, unmade=("defect x has no assertion to change",))
    kept.unlink()
    assert reused_or_proven_twins(family, graders, None, ("one-off",), None, lambda: refused) == (refused, False)
    assert not kept.exists()
    keys = {
        twins_key(family, graders, None, ("one-off",), None),
        twins_key(family, graders, None, ("conflicting",), None),
        twins_key(family, graders, None, ("one-off",), family.defects[:2]),
        twins_key(family, graders[:-1], None, ("one-off",), None),
        proof_key(family, graders, None),
    }
    assert None not in keys and len(keys) == 5
