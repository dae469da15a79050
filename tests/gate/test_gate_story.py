"""The gate's story as users meet it: a first look at N=20 that cannot decide, a plan, a confirmatory BLOCK.

The figures are the recorded run's (examples/retry/recorded_run.json); the descriptors' seeds
were fixed before it was made. Coding arms are graded by the family's graders.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from certlab_demo.chapter_gate import choose_n, planning_rates, run_figures
from gate_helpers import EXAMPLES, lines, run, write
from made_once import a_vs_b_store

from certlab_core._runtime.registry import Registry
from certlab_core.certify.reuse import PROOF_KIND
from certlab_core.gate import family as family_stage
from certlab_core.sdk.measured_cache import CACHE_VARIABLE

RECORDED: dict[str, Any] = json.loads((EXAMPLES / "recorded_run.json").read_text())["figures"]
FALSIFY = "reserve-timeout"
CEILING = "confirm-down"  # left out of the A against A run here: never gated, so the bounds stay those recorded


def example(name: str, without: str | None = None) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    if without is not None:
        data["conditions"] = [c for c in data["conditions"] if c["name"] != without]
    return data


def test_the_experiments_differ_only_in_their_arms_size_and_seed() -> None:
    first, confirm, same = example("a_vs_b_first_look.yaml"), example("a_vs_b.yaml"), example("a_vs_a.yaml")
    for data in (first, confirm, same):
        for key in ("experiment", "n_per_arm", "seed", "arms"):
            data.pop(key)
    assert first == confirm == same
    assert example("a_vs_b_first_look.yaml")["n_per_arm"] == 20
    assert example("a_vs_b_first_look.yaml")["seed"] != example("a_vs_b.yaml")["seed"] == example("a_vs_a.yaml")["seed"]


def test_the_first_look_at_n_20_is_inconclusive_as_recorded(registry: Registry, tmp_path: Path) -> None:
    _store, decision = run(registry, write(tmp_path, example("a_vs_b_first_look.yaml")), tmp_path / "runs")
    assert decision["verdict"] == "INCONCLUSIVE" and decision["exit_code"] == 2
    falsify = next(c for c in decision["conditions"] if c["name"] == FALSIFY)
    assert falsify["bounds"]["lower"] < -0.1 < falsify["bounds"]["upper"]  # too wide to decide
    assert run_figures(decision) == RECORDED["first-look"]
    assert [round(rate, 6) for rate in planning_rates(decision)] == RECORDED["plan"]["rates"]


def test_the_plan_at_the_first_looks_rates_chooses_the_committed_n(registry: Registry) -> None:
    rule = registry.get("statistical_rules", "clopper-pearson")
    p_a, p_b = RECORDED["plan"]["rates"]
    sizes = [int(n) for n in RECORDED["plan"]["block"]]
    block = {n: rule.plan(p_a, p_b, n, 0.05, 0.1, 2, 1) for n in sizes}
    same = {n: rule.plan(p_a, p_a, n, 0.05, 0.1, 2, 1) for n in sizes}
    chosen = choose_n(block, same)
    assert chosen == RECORDED["plan"]["n"] == example("a_vs_b.yaml")["n_per_arm"] == example("a_vs_a.yaml")["n_per_arm"]
    smaller = [n for n in sizes if n < chosen]
    assert all(block[n]["BLOCK"] < 0.8 or same[n]["PASS"] < 0.8 for n in smaller)


def test_the_confirmatory_run_blocks_as_recorded(tmp_path_factory: pytest.TempPathFactory) -> None:
    # certlab run examples/retry/a_vs_b.yaml, as the demo runs it, ceiling included: made once per test run for
    # the tests that read it (exit 1 checked there)
    store = a_vs_b_store(tmp_path_factory)
    decision = json.loads((store / "decision.json").read_text(encoding="utf-8"))
    assert decision["verdict"] == "BLOCK", decision["reasons"]
    conditions = run_figures(decision)["conditions"]
    assert conditions == RECORDED["a-vs-b"]["conditions"]
    condition = conditions[FALSIFY]
    # B failed wherever the timed-out reserve fired (some order was not already reserved), and elsewhere
    # only where A failed too (a confirm busy three times running)
    falsify = [x for x in lines(store) if x["condition"] == FALSIFY]
    failed = {(x["arm"], x["index"]) for x in falsify if x["outcome"] == "failure"}
    fired = {x["index"] for x in falsify if x["arm"] == "candidate" and x["faults"][0]["fired"]}
    assert fired <= {index for arm, index in failed if arm == "candidate"}
    assert {index for arm, index in failed if arm == "candidate"} - fired <= {i for a, i in failed if a == "baseline"}
    successes, trials = (int(v) for v in condition["counts"]["candidate"].split("/"))
    assert 0.55 <= successes / trials <= 0.80


def test_a_against_a_at_the_planned_n_passes_as_recorded(registry: Registry, tmp_path: Path) -> None:
    _store, decision = run(registry, write(tmp_path, example("a_vs_a.yaml", without=CEILING)), tmp_path / "runs")
    assert decision["verdict"] == "PASS", decision["reasons"]
    conditions = run_figures(decision)["conditions"]
    assert conditions == {k: v for k, v in RECORDED["a-vs-a"]["conditions"].items() if k != CEILING}


def oracle_vs_null(defects: list[str], n_per_arm: int) -> dict[str, Any]:
    """Coding arms on intervals: the oracle against the null agent, graded by the family's graders."""
    return {
        "experiment": "intervals-oracle-vs-null",
        "task": {"family": "intervals", "defects": defects},
        "oracle": "graders",
        "arms": {"baseline": {"adapter": "oracle"}, "candidate": {"adapter": "null"}},
        "conditions": [{"name": "clean", "bucket": "benign"}],
        "n_per_arm": n_per_arm,
        "budgets": {"seconds": 120},
    }


def test_a_run_of_coding_arms_keeps_its_proof_and_the_next_run_reuses_it(
    registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # certlab run proved its family afresh on every run (about a CPU second for intervals), where certify keeps a
    # proof that holds in certlab's cache and reuses it while nothing that decides it moved; and it said nothing
    # of its proof, where certify says what it showed and whether it was reused.
    monkeypatch.setenv(CACHE_VARIABLE, str(tmp_path / "cache"))
    descriptor = write(tmp_path, oracle_vs_null(["length-counts-end"], n_per_arm=2))
    first_store, first = run(registry, descriptor, tmp_path / "first")
    assert len(list((tmp_path / "cache" / PROOF_KIND).glob("*.json"))) == 1
    said = "prove intervals: the clean tree passes 25 tests; all 6 seeded defects are caught"
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("prove ")]
    assert line == said

    def proved_again(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the kept proof was not reused")

    monkeypatch.setattr(family_stage, "prove", proved_again)
    second_store, second = run(registry, descriptor, tmp_path / "second")
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("prove ")]
    assert line == f"{said} (measured earlier on the same inputs, reused from certlab's cache)"
    assert (second["verdict"], second["exit_code"]) == (first["verdict"], first["exit_code"])
    outcomes = [sorted((x["id"], x["outcome"]) for x in lines(store)) for store in (first_store, second_store)]
    assert outcomes[0] == outcomes[1] and len(outcomes[0]) == 4


def test_coding_arms_are_graded_by_the_family_graders(registry: Registry, tmp_path: Path) -> None:
    data = oracle_vs_null(["length-counts-end", "intersection-inverted"], n_per_arm=12)
    store, decision = run(registry, write(tmp_path, data), tmp_path / "runs")
    assert decision["verdict"] == "BLOCK", decision
    found = lines(store)
    assert {(x["arm"], x["outcome"]) for x in found} == {("baseline", "success"), ("candidate", "failure")}
    null = next(x for x in found if x["arm"] == "candidate")
    assert null["failure_mode"] == "suite-failed" and null["grades"]
    assert null["events"] == [] and null["oracle"]["passed"] is False
