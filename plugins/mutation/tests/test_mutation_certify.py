"""The mutation proof inside a certification: certify --mutants records it, --min-mutation-score refuses below it
naming the survivors, CONTRACT.md and COMPARISON.md state it, regrade --mutants re-earns it; and certlab prove."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest
from certlab_compare.publication import compile_publication
from test_mutation_runner import write_toy_family

from certlab_core._runtime.registry import Registry, discover
from certlab_core.certify.certification import CertifyOptions, certify
from certlab_core.certify.out_folder import write_certification
from certlab_core.certify.regrade import regrade
from certlab_core.plugin import hookimpl
from certlab_core.plugin.types.family import TaskFamily
from certlab_core.testing import run_certlab


@pytest.fixture(scope="module")
def toy_registry(tmp_path_factory: pytest.TempPathFactory) -> Registry:
    family = write_toy_family(tmp_path_factory.mktemp("toy-family"))
    module = types.ModuleType("certlab_toy_family")

    @hookimpl
    def certlab_task_families() -> list[TaskFamily]:
        return [family]

    module.certlab_task_families = certlab_task_families  # type: ignore[attr-defined]
    return discover(extra=[("toy", module)])


def certify_toy(registry: Registry, out: Path, **options: object) -> tuple[int, tuple[str, ...], dict]:
    messages: list[str] = []
    result = certify(registry, CertifyOptions(families=("toy",), agent="oracle", workers=2, **options), messages.append)
    write_certification(out, result, registry)
    return result.exit_code, result.problems, json.loads((out / "bundle.json").read_text())


@pytest.fixture(scope="module")
def toy_certification(toy_registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("published") / "oracle-toy"
    exit_code, problems, _bundle = certify_toy(toy_registry, out)  # the mutation proof is run by default
    assert exit_code == 0, problems
    return out


def test_certify_mutants_records_the_proof_and_warns_below_the_family_threshold(toy_certification: Path) -> None:
    bundle = json.loads((toy_certification / "bundle.json").read_text())
    assert bundle["summary"]["fixed"] == 1
    (proof,) = bundle["instrument"]
    record = proof["mutation"]
    assert (record["mutants"], record["killed_by_suite"], record["killed"]) == (10, 6, 8)
    assert (record["suite_score"], record["score"], record["threshold"], record["minimum"]) == (0.6, 0.8, 0.9, None)
    assert record["mutator"] == "certlab-ast/1" and len(record["mutants_sha256"]) == 64
    assert [s["mutant"] for s in record["survivors"]] == ["toy.py:5:14:compare", "toy.py:24:12:integer"]
    assert "+    return 4" in record["survivors"][1]["diff"]
    assert record["refusals"] == [] and "below its threshold 90.0%" in record["warnings"][0]
    assert (record["visible_threshold"], record["visible_minimum"]) == (0.8, None)
    assert (
        "the visible suite alone kills 60.0% of 10 mutants, below its visible threshold 80.0%"
        in (record["warnings"][1])
    )


def test_no_mutants_records_the_proof_as_not_measured_and_the_contract_says_so(
    toy_registry: Registry, tmp_path: Path
) -> None:
    exit_code, problems, bundle = certify_toy(toy_registry, tmp_path / "skipped", mutants=False)
    assert exit_code == 0, problems
    record = bundle["instrument"][0]["mutation"]
    assert (record["measured"], record["why"], record["refusals"]) == (False, "certify --no-mutants", [])
    contract = (tmp_path / "skipped" / "CONTRACT.md").read_text()
    assert "- `toy` mutation proof: not measured (certify --no-mutants)." in contract
    result = regrade(toy_registry, tmp_path / "skipped", workers=2, progress=lambda _m: None, mutants=True)
    assert "mutants toy: the bundle records no mutation proof to re-check (not measured: certify --no-mutants)" in (
        result.lines
    )


def test_the_contract_says_what_share_of_how_many_mutants_is_killed(toy_certification: Path) -> None:
    contract = (toy_certification / "CONTRACT.md").read_text()
    assert (
        "- `toy` mutation proof: the suite and held-out cases kill 80.0% of 10 mutants (the visible suite alone 60.0%, "
        "its threshold 80%; the family's threshold 90%);" in contract
    )
    assert "surviving: `toy.py:5:14:compare`, `toy.py:24:12:integer`" in contract


def test_the_comparison_lists_each_family_mutation_proof(toy_certification: Path) -> None:
    comparison = compile_publication(toy_certification.parent).comparison
    assert "| family | mutants | visible suite kills | suite + held-out kill | survivors | run |" in comparison
    assert "| toy | 10 | 60.0% | 80.0% | `toy.py:5:14:compare`, `toy.py:24:12:integer` | [oracle-toy]" in comparison


def test_a_minimum_above_the_score_refuses_to_certify_naming_the_survivors(
    toy_registry: Registry, tmp_path: Path
) -> None:
    exit_code, problems, bundle = certify_toy(toy_registry, tmp_path / "refused", min_mutation_score=0.85)
    assert exit_code == 3
    assert any("below --min-mutation-score 85.0%" in p and "toy.py:24:12:integer" in p for p in problems)
    assert bundle["trials"] == [] and bundle["instrument"][0]["mutation"]["minimum"] == 0.85
    assert bundle["instrument"][0]["mutation"]["score"] == 0.8  # recorded either way
    # the visible suite alone (60%) is held to the family's visible threshold (80%) under a minimum too
    visible = [p for p in problems if "the visible suite alone kills 60.0%" in p]
    assert len(visible) == 1 and "(its visible threshold, binding under --min-mutation-score)" in visible[0]
    assert bundle["instrument"][0]["mutation"]["visible_minimum"] == 0.8


def test_a_visible_minimum_of_its_own_refuses_or_lets_the_visible_suite_pass(
    toy_registry: Registry, tmp_path: Path
) -> None:
    exit_code, problems, bundle = certify_toy(toy_registry, tmp_path / "lenient", min_visible_mutation_score=0.5)
    assert exit_code == 0 and problems == ()
    assert bundle["instrument"][0]["mutation"]["visible_minimum"] == 0.5
    exit_code, problems, bundle = certify_toy(toy_registry, tmp_path / "strict", min_visible_mutation_score=0.7)
    assert exit_code == 3 and bundle["trials"] == []
    assert [p for p in problems if "mutation" in p or "visible" in p] == [
        "family toy: the visible suite alone kills 60.0% of 10 mutants, below 70.0% (--min-visible-mutation-score): "
        "plausible wrong fixes pass the tests an agent sees; it lets through: toy.py:5:14:compare, "
        "toy.py:20:16:compare, toy.py:20:19:integer, toy.py:24:12:integer"
    ]


def test_regrade_mutants_re_earns_the_recorded_score(toy_registry: Registry, toy_certification: Path) -> None:
    messages: list[str] = []
    result = regrade(toy_registry, toy_certification, 2, messages.append, mutants=True)
    assert result.status == "consistent", result.lines
    assert "mutants toy: recorded 80.0% of 10 mutants, re-earned 80.0% of 10" in result.lines


def test_regrade_mutants_names_a_recorded_verdict_a_re_run_does_not_earn(
    toy_registry: Registry, toy_certification: Path, tmp_path: Path
) -> None:
    from certlab_core.sdk.canonical import sealed

    bundle = json.loads((toy_certification / "bundle.json").read_text())
    bundle.pop("seal")
    record = bundle["instrument"][0]["mutation"]
    for result in record["results"]:
        if result["mutant"] == "toy.py:24:12:integer":
            result.update(outcome="failed", grader="suite")
    (tmp_path / "bundle.json").write_text(json.dumps(sealed(bundle)))
    result = regrade(toy_registry, tmp_path, 2, lambda _m: None, mutants=True)
    assert result.status == "mismatch"
    assert "mismatch: mutants toy: mutant toy.py:24:12:integer: recorded killed by suite, now survived" in result.lines


def test_certlab_prove_proves_a_family_and_refuses_a_minimum_outside_zero_to_one() -> None:
    done = run_certlab("prove", "--family", "intervals")
    assert done.returncode == 0, done.stderr
    assert "prove intervals: the clean tree passes 25 tests; all 6 seeded defects are caught" in done.stdout
    assert done.stdout.rstrip().endswith("prove: holds")
    done = run_certlab("prove", "--family", "intervals", "--min-mutation-score", "90")
    assert done.returncode == 4
    assert done.stderr.strip() == (
        "certlab: error: --min-mutation-score must be a share between 0 and 1 (got 90), e.g. 0.9"
    )
    done = run_certlab("prove", "--family", "intervals", "--min-visible-mutation-score", "80")
    assert done.returncode == 4
    assert done.stderr.strip() == (
        "certlab: error: --min-visible-mutation-score must be a share between 0 and 1 (got 80), e.g. 0.8"
    )


def test_certlab_prove_mutates_the_fixed_tree_given_for_a_user_task(tmp_path: Path) -> None:
    import re
    import shutil

    task = tmp_path / "thermo"
    assert run_certlab("init-task", str(task)).returncode == 0
    fixed = tmp_path / "fixed"
    shutil.copytree(task / "fixture", fixed)
    module = fixed / "temperature.py"
    module.write_text(module.read_text().replace("fahrenheit - 32 * 5 / 9", "(fahrenheit - 32) * 5 / 9"))
    done = run_certlab("prove", "--task", str(task), "--fixed", str(fixed), "--mutants", "--quiet")
    assert done.returncode == 0, done.stderr
    found = re.search(r"mutants thermo: (\d+) mutants: the visible suite kills [\d.]+% \((\d+)\)", done.stdout)
    assert found and int(found[1]) > 0 and 0 < int(found[2]) <= int(found[1]), done.stdout
    unfixed = run_certlab("prove", "--task", str(task), "--mutants", "--quiet")
    assert unfixed.returncode == 0 and "no fixed tree is given (--fixed DIR)" in unfixed.stderr
    alone = run_certlab("prove", "--family", "intervals", "--fixed", str(fixed))
    assert alone.returncode == 4 and "--fixed DIR goes with exactly one --task DIR" in alone.stderr
