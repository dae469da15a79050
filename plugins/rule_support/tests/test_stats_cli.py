"""certlab stats bounds, plan and selfcheck: the issue's examples, JSON shapes, refusals, and a miscalibrated rule."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from certlab_core.cli import main
from certlab_core.plugin.errors import UsageError
from certlab_core.sdk.looks import look_alpha, look_sizes
from certlab_core.testing import run_certlab


def certlab(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --------------------------------------------------------------------------- the kernel's look helper


def test_look_sizes_are_ceil_of_j_n_over_l() -> None:
    assert look_sizes(200) == (200,)
    assert look_sizes(200, 4) == (50, 100, 150, 200)
    assert look_sizes(10, 3) == (4, 7, 10)
    assert look_sizes(7, 7) == (1, 2, 3, 4, 5, 6, 7)
    assert look_alpha(0.05, 5) == pytest.approx(0.01)


@pytest.mark.parametrize(("n", "looks"), [(0, 1), (5, 0), (5, 6), (5.5, 1), (True, 1)])
def test_look_sizes_refuse_impossible_designs(n: object, looks: object) -> None:
    with pytest.raises(UsageError):
        look_sizes(n, looks)  # type: ignore[arg-type]


def test_look_helpers_and_the_stats_commands_import_nothing_heavy() -> None:
    code = (
        "import sys, certlab_core.sdk.looks, certlab_rule_support.stats_cmd\n"
        "heavy = [m for m in ('scipy', 'numpy') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------- stats bounds


def test_bounds_example_from_the_issue_blocks(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = certlab(capsys, "stats", "bounds", "--baseline", "200/200", "--candidate", "130/200")
    assert code == 0
    assert "candidate - baseline: [-0.4304, -0.2537]" in out
    assert "verdict: BLOCK" in out
    assert "wilson 95%" in out and "clopper-pearson per arm, 97.5%" in out


def test_bounds_json_carries_bounds_verdict_and_per_arm_intervals(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = certlab(capsys, "stats", "bounds", "--baseline", "200/200", "--candidate", "130/200", "--json")
    assert code == 0
    payload = json.loads(out)
    assert payload["schema"] == "certlab.stats-bounds/1" and payload["rule"] == "clopper-pearson"
    assert payload["verdict"] == "BLOCK"
    assert round(payload["bounds"]["lower"], 4) == -0.4304 and round(payload["bounds"]["upper"], 4) == -0.2537
    baseline, candidate = payload["baseline"], payload["candidate"]
    assert payload["bounds"]["lower"] == pytest.approx(candidate["interval"][0] - baseline["interval"][1])
    assert payload["bounds"]["upper"] == pytest.approx(candidate["interval"][1] - baseline["interval"][0])
    assert baseline["interval_alpha"] == pytest.approx(0.025)  # tails alpha / (4K) = 0.0125
    assert candidate["wilson_alpha"] == 0.05 and candidate["wilson"][0] < 0.65 < candidate["wilson"][1]


def test_bounds_with_newcombe_reproduces_the_published_example(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = certlab(
        capsys, "stats", "bounds", "--baseline", "48/80", "--candidate", "56/70", "--rule", "newcombe", "--json"
    )
    payload = json.loads(out)
    assert code == 0 and payload["verdict"] == "PASS"
    assert (round(payload["bounds"]["lower"], 4), round(payload["bounds"]["upper"], 4)) == (0.0524, 0.3339)


def test_more_conditions_widen_the_bounds(capsys: pytest.CaptureFixture[str]) -> None:
    widths = []
    for conditions in ("1", "4"):
        _code, out, _err = certlab(
            capsys,
            "stats",
            "bounds",
            "--baseline",
            "180/200",
            "--candidate",
            "170/200",
            "--conditions",
            conditions,
            "--json",
        )
        bounds = json.loads(out)["bounds"]
        widths.append(bounds["upper"] - bounds["lower"])
    assert widths[1] > widths[0]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--baseline", "200", "--candidate", "130/200"), "--baseline '200' is not SUCCESSES/TRIALS"),
        (("--baseline", "200/200", "--candidate", "13O/200"), "--candidate '13O/200' is not SUCCESSES/TRIALS"),
        (("--baseline", "201/200", "--candidate", "130/200"), "more successes than trials"),
        (("--baseline", "0/0", "--candidate", "130/200"), "no trials"),
        # Before: a billion trials ran past the plugin wait, "the statistical rule ... did not return within 60 s".
        (
            ("--baseline", "1000000000/1000000000", "--candidate", "5/10"),
            "--baseline '1000000000/1000000000': more than 10000000 trials, the most stats bounds reads per arm",
        ),
        (("--baseline", "200/200", "--candidate", "130/200", "--alpha", "0"), "--alpha 0 is outside (0, 1)"),
        (("--baseline", "200/200", "--candidate", "130/200", "--alpha", "1.5"), "--alpha 1.5 is outside (0, 1)"),
        (("--baseline", "200/200", "--candidate", "130/200", "--alpha", "abc"), "--alpha 'abc' is not a number"),
        (("--baseline", "200/200", "--candidate", "130/200", "--delta", "1"), "--delta 1 is outside [0, 1)"),
        (("--baseline", "200/200", "--candidate", "130/200", "--delta", "-0.1"), "--delta -0.1 is outside [0, 1)"),
        (("--baseline", "200/200", "--candidate", "130/200", "--conditions", "0"), "at least one gating condition"),
        # "'-1' is not a whole number" was wrong: it is one, below 1
        (("--baseline", "200/200", "--candidate", "130/200", "--conditions", "-1"), "'-1' is not a whole number of 1"),
        (("--baseline", "200/200", "--candidate", "130/200", "--looks", "2.5"), "'2.5' is not a whole number of 1"),
        (
            (
                "--candidate",
                "130/200",
            ),
            "--baseline is required",
        ),
        (("--baseline", "200/200", "--candidate", "130/200", "--rule", "bayes"), "valid: clopper-pearson, newcombe"),
    ],
)
def test_bounds_refusals_are_one_line_and_exit_4(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], fragment: str
) -> None:
    code, out, err = certlab(capsys, "stats", "bounds", *args)
    assert code == 4
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("certlab: error: ") and fragment in err


# --------------------------------------------------------------------------- plan


def test_plan_example_from_the_issue(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = certlab(capsys, "plan", "--baseline", "0.8", "--candidate", "0.8", "-n", "200")
    assert code == 0
    row = next(line.split() for line in out.splitlines() if line.split()[:1] == ["200"])
    assert row[1] == "0.2184"


def test_plan_json_gives_one_design_per_n_summing_to_one(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = certlab(
        capsys, "plan", "--baseline", "0.9", "--candidate", "0.6", "-n", "50,200,1000", "--looks", "4", "--json"
    )
    assert code == 0
    payload = json.loads(out)
    assert payload["schema"] == "certlab.plan/1" and [d["n"] for d in payload["designs"]] == [50, 200, 1000]
    for design in payload["designs"]:
        assert design["looks"] == list(look_sizes(design["n"], 4))
        assert design["PASS"] + design["BLOCK"] + design["INCONCLUSIVE"] == pytest.approx(1.0, abs=1e-12)
    blocks = [d["BLOCK"] for d in payload["designs"]]
    assert blocks == sorted(blocks) and blocks[-1] > 0.99  # a drop of 0.3 is found as N grows


def test_plan_with_newcombe_and_looks(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = certlab(
        capsys, "plan", "--baseline", "0.8", "--candidate", "0.8", "-n", "200", "--rule", "newcombe", "--looks", "4"
    )
    assert code == 0 and "50,100,150,200" in out and "newcombe" in out


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--baseline", "1.2", "--candidate", "0.8", "-n", "200"), "--baseline 1.2 is not a success rate"),
        (("--baseline", "0.8", "--candidate", "x", "-n", "200"), "--candidate 'x' is not a number"),
        (("--baseline", "0.8", "--candidate", "0.8", "-n", "200,x"), "'x' is not a number of trials per arm"),
        (("--baseline", "0.8", "--candidate", "0.8", "-n", "0"), "'0' is not a number of trials per arm"),
        (("--baseline", "0.8", "--candidate", "0.8", "-n", "3", "--looks", "4"), "--looks 4 is more than -n 3"),
        # Before: this ran past the plugin wait, "the statistical rule ...'s plan did not return within 60 s".
        (
            ("--baseline", "0.8", "--candidate", "0.7", "-n", "20000", "--looks", "1000"),
            "-n 20000 at --looks 1000 is 20000000 trials times looks, more than the 2000000 plan enumerates",
        ),
        (("--baseline", "0.8", "--candidate", "0.8"), "-n is required"),
        (("--baseline", "0.8", "--candidate", "0.8", "-n", "200", "--alpha", "-1"), "--alpha -1 is outside (0, 1)"),
    ],
)
def test_plan_refusals_are_one_line_and_exit_4(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], fragment: str
) -> None:
    code, out, err = certlab(capsys, "plan", *args)
    assert code == 4 and out == ""
    assert err.count("\n") == 1 and fragment in err


# --------------------------------------------------------------------------- selfcheck


def test_selfcheck_of_the_default_rule_holds(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = certlab(capsys, "selfcheck", "--json")
    assert code == 0
    payload = json.loads(out)
    assert payload["rule"] == "clopper-pearson" and payload["holds"] is True
    false_pass = payload["sweep"]["false_pass_at_margin"]
    false_block = payload["sweep"]["false_block_no_change"]
    assert 0.0 < false_pass["rate"] <= 0.05 and false_pass["holds"]
    assert 0.0 <= false_block["rate"] <= 0.05 and false_block["holds"]
    row = next(r for r in payload["designs"] if r["n"] == 200 and r["baseline"] == 0.8)
    assert round(row["no_change"]["PASS"], 3) == 0.218


# --------------------------------------------------------------------------- the real CLI, and a third party's rules


RULE_PLUGINS = '''
"""Two rules installed for the CLI tests: one spends twenty times its alpha, one cannot plan."""

from certlab_clopper_pearson import rule as exact
from certlab_core.plugin import hookimpl
from certlab_core.plugin.types.rule import StatisticalRule


def overspent_decide(b, nb, c, nc, alpha=0.05, delta=0.1, conditions=1, looks=1):
    return exact.decide(b, nb, c, nc, min(0.9, 20 * alpha), delta, conditions, looks)


def overspent_plan(p_b, p_c, n, alpha=0.05, delta=0.1, conditions=1, looks=1):
    return exact.plan(p_b, p_c, n, min(0.9, 20 * alpha), delta, conditions, looks)


@hookimpl
def certlab_statistical_rules():
    return [
        StatisticalRule(name="overspent", description="spends 20 alpha", decide=overspent_decide,
                        interval=exact.interval, plan=overspent_plan),
        StatisticalRule(name="no-plan", description="cannot plan", decide=exact.decide, interval=exact.interval),
    ]
'''


@pytest.fixture(scope="module")
def third_party_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment where a third party's rule distribution is installed (a package and its dist-info)."""
    site = tmp_path_factory.mktemp("site")
    (site / "certlab_test_rules.py").write_text(textwrap.dedent(RULE_PLUGINS))
    info = site / "certlab_test_rules-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: certlab-test-rules\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[certlab.plugins]\ntest-rules = certlab_test_rules\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH", "")]))
    return env


def test_the_real_cli_prints_the_bounds() -> None:
    result = run_certlab("stats", "bounds", "--baseline", "200/200", "--candidate", "130/200")
    assert result.returncode == 0, result.stderr
    assert "[-0.4304, -0.2537]" in result.stdout and "verdict: BLOCK" in result.stdout


def test_the_real_cli_refuses_malformed_counts_in_one_line() -> None:
    result = run_certlab("stats", "bounds", "--baseline", "two/200", "--candidate", "130/200")
    assert result.returncode == 4
    assert result.stderr.strip().splitlines() == [
        "certlab: error: --baseline 'two/200' is not SUCCESSES/TRIALS; write it like 130/200"
    ]


def test_selfcheck_catches_a_rule_that_overspends_alpha(third_party_env: dict[str, str]) -> None:
    result = run_certlab("selfcheck", "--rule", "overspent", env=third_party_env)
    assert result.returncode == 3, result.stderr
    assert "EXCEEDED" in result.stdout
    assert result.stderr.strip().splitlines()[-1].startswith("certlab: error: selfcheck: the rule 'overspent' exceeds")


def test_plan_refuses_a_rule_that_cannot_plan(third_party_env: dict[str, str]) -> None:
    result = run_certlab(
        "plan", "--baseline", "0.8", "--candidate", "0.8", "-n", "200", "--rule", "no-plan", env=third_party_env
    )
    assert result.returncode == 4
    assert "the statistical rule 'no-plan' cannot plan" in result.stderr


def test_an_unknown_rule_lists_the_installed_ones(third_party_env: dict[str, str]) -> None:
    result = run_certlab(
        "plan", "--baseline", "0.8", "--candidate", "0.8", "-n", "200", "--rule", "bayes", env=third_party_env
    )
    assert result.returncode == 4
    assert "valid: clopper-pearson, newcombe, no-plan, overspent" in result.stderr
