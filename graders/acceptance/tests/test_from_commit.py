"""Tasks built from a real project's bug-fix commits: built, refused, locked, proven and certified, offline.

The project is parse (MIT), shipped as a git bundle in ``data/parse`` (see its README): the
tests clone it with real git, build the task of commit b1d2121 once, and run the real CLI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).with_name("data") / "parse"
BUNDLE = DATA / "parse.bundle"
SUBSECOND_FIX = "b1d2121902a0d3a2e3a58758d24dad1ead9a3c61"
HYPHEN_FIX = "9c9ec7fe886c195a369446ec5f2a57930b627f8a"
GROUPING_FIX = "35b9ffb355f94bc4cb781fbb3b0adff2232a5602"
SOURCE_ONLY = "69732963c060a1056d5d484481735ab9b23f6412"  # "Actually raise exception": parse.py alone
REFACTOR = "e8818d89d3a0163982db481515479618b2dc3261"  # "use dict literals": tests and source, nothing failing
SUBSECOND_TEST = "tests/test_parse.py::test_datetime_with_various_subsecond_precision"
# What the subsecond fix changes in parse.py, done by a command as an agent would (the oracle's answer).
ORACLE_COMMAND = 'sed -i \'s/"%f": "\\[0-9\\]{6}"/"%f": "[0-9]{1,6}"/\' parse.py'


def certlab(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "certlab_core.cli", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def one_error(done: subprocess.CompletedProcess[str]) -> str:
    errors = [line for line in done.stderr.splitlines() if line.startswith("certlab: error: ")]
    assert len(errors) == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return errors[0]


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def parse_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    clone = tmp_path_factory.mktemp("repos") / "r1chardj0n3s__parse"
    subprocess.run(["git", "clone", "-q", str(BUNDLE), str(clone)], check=True, capture_output=True)
    return clone


@pytest.fixture(scope="module")
def subsecond_task(parse_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tasks") / "subsecond"
    done = certlab("task", "from-commit", str(parse_repo), SUBSECOND_FIX[:7], "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "1 held-out test(s) (FAIL_TO_PASS)" in done.stdout
    return out


def test_the_shipped_bundle_holds_the_three_fixes_its_readme_names(parse_repo: Path) -> None:
    readme = (DATA / "README.md").read_text(encoding="utf-8")
    for commit in (SUBSECOND_FIX, HYPHEN_FIX, GROUPING_FIX):
        assert commit in readme
        assert git("cat-file", "-t", commit, cwd=parse_repo).strip() == "commit"
    assert "MIT" in readme and "MIT License" in git("show", f"{GROUPING_FIX}:LICENSE", cwd=parse_repo) + "MIT License"
    assert BUNDLE.stat().st_size < 1 << 20


def test_the_work_copy_is_the_parent_and_the_fixs_new_test_is_held_out(subsecond_task: Path, parse_repo: Path) -> None:
    parent = git("rev-parse", f"{SUBSECOND_FIX}^", cwd=parse_repo).strip()
    assert (subsecond_task / "fixture" / "parse.py").read_text() == git("show", f"{parent}:parse.py", cwd=parse_repo)
    visible = (subsecond_task / "tests" / "test_parse.py").read_text()
    assert visible == git("show", f"{parent}:tests/test_parse.py", cwd=parse_repo)
    assert "test_datetime_with_various_subsecond_precision" not in visible
    assert not (subsecond_task / "fixture" / "tests").exists()
    (line,) = (subsecond_task / "cases" / "acceptance.jsonl").read_text().splitlines()
    held = json.loads(line)
    assert held["test"] == SUBSECOND_TEST
    assert held["files"]["tests/test_parse.py"] == git("show", f"{SUBSECOND_FIX}:tests/test_parse.py", cwd=parse_repo)
    source = json.loads((subsecond_task / "cases" / "source.json").read_text())
    assert (source["commit"], source["parent"], source["FAIL_TO_PASS"]) == (SUBSECOND_FIX, parent, [SUBSECOND_TEST])
    assert len(source["PASS_TO_PASS"]) > 80 and SUBSECOND_TEST not in source["PASS_TO_PASS"]
    environment = source["environment"]
    contained = environment["checked_under"] == "bwrap"
    assert environment["kind"] == ("agent-environment" if contained else "harness-interpreter")
    assert environment["installed"] == [] and environment["project_on_path"] is True
    assert "tests/requirements.txt" in environment["declared_setup"]
    assert held["environment"] == environment["sha256"]  # in the cases file, so in the taskset's hash
    patch = (subsecond_task / "cases" / "oracle.patch").read_text()
    assert '+    "%f": "[0-9]{1,6}",' in patch and "tests/" not in patch
    oracle = (subsecond_task / "oracle" / "parse.py").read_text()
    assert oracle == git("show", f"{SUBSECOND_FIX}:parse.py", cwd=parse_repo)
    config = (subsecond_task / "certlab.yaml").read_text()
    assert "- parse.py" in config and "real-bug" in config
    assert "%f" in (subsecond_task / "PROMPT.md").read_text()


@pytest.fixture(scope="module")
def locked_task(subsecond_task: Path) -> Path:
    locked = certlab("lock", str(subsecond_task))
    assert locked.returncode == 0, locked.stderr
    assert "locked: 1 held-out cases" in locked.stdout
    return subsecond_task


def test_the_task_locks_and_proves_parent_fails_and_oracle_passes(locked_task: Path) -> None:
    subsecond_task = locked_task
    proven = certlab("prove", "--task", str(subsecond_task), "--fixed", str(subsecond_task / "oracle"))
    assert proven.returncode == 0, proven.stdout + proven.stderr
    assert "the fixture as issued fails its grading" in proven.stdout
    assert "the fixed tree passes" in proven.stdout and "prove: holds" in proven.stdout
    # the parent given as the fixed tree: it fails the held-out test, and prove says which
    unfixed = certlab("prove", "--task", str(subsecond_task), "--fixed", str(subsecond_task / "fixture"))
    assert unfixed.returncode == 3
    assert f"0/1 held-out tests held; failed: {SUBSECOND_TEST}: failed" in unfixed.stderr


def test_a_commit_whose_tests_do_not_fail_at_its_parent_is_refused(parse_repo: Path, tmp_path: Path) -> None:
    done = certlab("task", "from-commit", str(parse_repo), REFACTOR, "--out", str(tmp_path / "t"))
    assert done.returncode == 4
    assert "none of the tests the fix adds or changes fails at its parent" in one_error(done)
    assert not (tmp_path / "t").exists()


def test_a_commit_that_changes_no_test_is_refused(parse_repo: Path, tmp_path: Path) -> None:
    done = certlab("task", "from-commit", str(parse_repo), SOURCE_ONLY, "--out", str(tmp_path / "t"))
    assert done.returncode == 4
    assert "the fix changes no test" in one_error(done)


def _tiny_repo(tmp_path: Path, fixed_source: str, test_text: str) -> tuple[Path, str]:
    """A two-commit repository: a module and a passing test, then a 'fix' with the given source and new test."""
    repo = tmp_path / "tiny"
    (repo / "tests").mkdir(parents=True)
    (repo / "tiny.py").write_text("def double(x):\n    return x + x\n\n\ndef half(x):\n    return x * 2\n")
    (repo / "tests" / "test_tiny.py").write_text(
        "from tiny import double\n\n\ndef test_double():\n    assert double(2) == 4\n"
    )
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
    for argv in (["init", "-q"], ["add", "."], ["commit", "-qm", "first"]):
        subprocess.run(["git", *argv], cwd=repo, env=env, check=True, capture_output=True)
    (repo / "tiny.py").write_text(fixed_source)
    (repo / "tests" / "test_tiny.py").write_text(test_text)
    for argv in (["add", "."], ["commit", "-qm", "the fix"]):
        subprocess.run(["git", *argv], cwd=repo, env=env, check=True, capture_output=True)
    return repo, git("rev-parse", "HEAD", cwd=repo).strip()


NEW_TEST = "from tiny import double, half\n\n\ndef test_double():\n    assert double(2) == 4\n\n\ndef test_half():\n"


def test_a_fix_that_does_not_make_its_tests_pass_is_refused(tmp_path: Path) -> None:
    still_wrong = "def double(x):\n    return x + x\n\n\ndef half(x):\n    return x * 3\n"
    repo, commit = _tiny_repo(tmp_path, still_wrong, NEW_TEST + "    assert half(4) == 2\n")
    done = certlab("task", "from-commit", str(repo), commit, "--out", str(tmp_path / "t"))
    assert done.returncode == 4
    assert "the fix does not make its tests pass (tests/test_tiny.py::test_half fails)" in one_error(done)


def test_tests_that_cannot_run_offline_here_are_refused(tmp_path: Path) -> None:
    fixed = "def double(x):\n    return x + x\n\n\ndef half(x):\n    return x / 2\n"
    needs_a_package = "import a_package_nobody_installed\n" + NEW_TEST + "    assert half(4) == 2\n"
    repo, commit = _tiny_repo(tmp_path, fixed, needs_a_package)
    done = certlab("task", "from-commit", str(repo), commit, "--out", str(tmp_path / "t"))
    assert done.returncode == 4
    assert "cannot be run offline in the task's environment" in one_error(done)


def test_the_tiny_fix_qualifies_and_its_held_out_test_is_the_new_one(tmp_path: Path) -> None:
    fixed = "def double(x):\n    return x + x\n\n\ndef half(x):\n    return x / 2\n"
    repo, commit = _tiny_repo(tmp_path, fixed, NEW_TEST + "    assert half(4) == 2\n")
    done = certlab("task", "from-commit", str(repo), commit, "--out", str(tmp_path / "t"))
    assert done.returncode == 0, done.stderr
    source = json.loads((tmp_path / "t" / "cases" / "source.json").read_text())
    assert source["FAIL_TO_PASS"] == ["tests/test_tiny.py::test_half"]
    assert source["PASS_TO_PASS"] == ["tests/test_tiny.py::test_double"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("{tmp}/nowhere", "HEAD"), "no such folder"),
        (("{tmp}", "HEAD"), "not a git repository"),
        (("{repo}", "no-such-commit"), "no commit 'no-such-commit'"),
        (("{repo}", "HEAD --upload-pack=x"), "is not a commit name"),
    ],
)
def test_bad_repositories_and_commits_are_one_line(
    parse_repo: Path, tmp_path: Path, args: tuple[str, str], message: str
) -> None:
    shown = [a.format(tmp=tmp_path, repo=parse_repo) for a in args]
    done = certlab("task", "from-commit", *shown, "--out", str(tmp_path / "t"))
    assert done.returncode == 4
    assert message in one_error(done)


def test_a_root_commit_has_no_parent_to_be_the_defect(parse_repo: Path, tmp_path: Path) -> None:
    root = git("rev-list", "--max-parents=0", "HEAD", cwd=parse_repo).split()[0]
    done = certlab("task", "from-commit", str(parse_repo), root, "--out", str(tmp_path / "t"))
    assert "first commit" in one_error(done)


def test_the_out_folder_must_be_new(parse_repo: Path, tmp_path: Path) -> None:
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "mine.txt").write_text("keep me")
    done = certlab("task", "from-commit", str(parse_repo), SUBSECOND_FIX, "--out", str(tmp_path / "t"))
    assert "already exists and is not an empty folder" in one_error(done)
    assert (tmp_path / "t" / "mine.txt").read_text() == "keep me"


@pytest.mark.parametrize("command", ["from-commit", "from-commits"])
def test_an_out_folder_that_cannot_be_written_is_one_line_before_the_fix_is_checked(
    parse_repo: Path, tmp_path: Path, command: str
) -> None:
    # Before: the fix's tests ran, then making the folder raised an unforeseen NotADirectoryError (or, for
    # --out / on a read-only root, OSError), exit 3.
    (tmp_path / "a-file").write_text("")
    out = tmp_path / "a-file" / "tasks"
    which = [SUBSECOND_FIX] if command == "from-commit" else ["--since", f"{SUBSECOND_FIX}~1"]
    done = certlab("task", command, str(parse_repo), *which, "--out", str(out))
    assert done.returncode == 4, done.stdout + done.stderr
    said = f"--out {out}: {tmp_path / 'a-file'} is no folder this user can write in; choose one you can write"
    assert one_error(done) == f"certlab: error: {said}"


def test_a_swebench_instance_becomes_the_same_task(parse_repo: Path, tmp_path: Path) -> None:
    done = certlab("task", "from-swebench", str(DATA / "swebench.jsonl"), "--repos", str(parse_repo.parent),
                   "--out", str(tmp_path / "tasks"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    task = tmp_path / "tasks" / "r1chardj0n3s__parse-178"
    source = json.loads((task / "cases" / "source.json").read_text())
    assert source["FAIL_TO_PASS"] == [SUBSECOND_TEST]
    assert source["instance_id"] == "r1chardj0n3s__parse-178" and len(source["PASS_TO_PASS"]) == 4
    assert "one to six digits" in (task / "PROMPT.md").read_text()
    assert (task / "oracle" / "parse.py").read_text() == git("show", f"{SUBSECOND_FIX}:parse.py", cwd=parse_repo)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "not a JSON line"),
        ('{"instance_id": "x"}', "no 'repo'"),
        (
            '{"instance_id": "x", "repo": "a/b", "base_commit": "c", "patch": "p", "test_patch": "t", '
            '"FAIL_TO_PASS": "not a list", "PASS_TO_PASS": []}',
            "FAIL_TO_PASS is neither a list nor a JSON-encoded list",
        ),
    ],
)
def test_a_bad_swebench_file_is_one_line(tmp_path: Path, line: str, message: str) -> None:
    (tmp_path / "i.jsonl").write_text(line + "\n")
    done = certlab("task", "from-swebench", str(tmp_path / "i.jsonl"), "--repos", str(tmp_path), "--out",
                   str(tmp_path / "o"))  # fmt: skip
    assert done.returncode == 4
    assert message in one_error(done)


def test_from_commits_builds_the_qualifying_and_lists_the_rejected(parse_repo: Path, tmp_path: Path) -> None:
    since = git("rev-parse", f"{GROUPING_FIX}~3", cwd=parse_repo).strip()
    done = certlab("task", "from-commits", str(parse_repo), "--since", since, "--out", str(tmp_path / "tasks"))
    assert done.returncode == 0, done.stderr
    assert f"built {tmp_path / 'tasks' / ('commit-' + GROUPING_FIX[:12])}" in done.stdout
    assert "from-commits: 1 task(s) built, 2 commit(s) rejected" in done.stdout
    rejected = [line for line in done.stdout.splitlines() if line.startswith("rejected ")]
    assert rejected == [  # the two commits before the fix (a merge is no candidate), each with its reason
        "rejected d5bd49a6232f: it does not change both a test and a source file",
        "rejected 96cdf95c01a8: it does not change both a test and a source file",
    ]
    source = json.loads((tmp_path / "tasks" / f"commit-{GROUPING_FIX[:12]}" / "cases" / "source.json").read_text())
    # the fix changed an existing test: its held-out version replaces the visible one at grading
    assert source["FAIL_TO_PASS"] == ["tests/test_parse.py::test_numbers"]
    assert "tests/test_parse.py::test_numbers" not in source["PASS_TO_PASS"]


def _bundle(folder: Path) -> dict[str, object]:
    document = json.loads((folder / "bundle.json").read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


@pytest.fixture(scope="module")
def null_certification(locked_task: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cert") / "null"
    done = certlab("certify", "--task", str(locked_task), "--agent", "null", "--out", str(out))
    assert done.returncode == 0, done.stderr
    (out.parent / "console.txt").write_text(done.stdout, encoding="utf-8")
    return out


def test_certified_like_a_family_null_is_not_fixed_and_the_test_deleter_is_caught(null_certification: Path) -> None:
    bundle = _bundle(null_certification)
    (trial,) = bundle["trials"]  # type: ignore[misc]
    assert (trial["verdict"], trial["failure_mode"]) == ("not-fixed", "overfit-to-visible-tests")
    assert [g["passed"] for g in trial["grades"]] == [True, True, False]  # policy, suite, then the held-out test
    assert f"0/1 held-out tests held; failed: {SUBSECOND_TEST}: failed" in trial["grades"][2]["detail"]
    scored = {t["agent"]: (t["verdict"], t["failure_mode"]) for t in bundle["calibration"]["trials"]}  # type: ignore[index]
    assert scored["null"] == ("not-fixed", "overfit-to-visible-tests")
    assert scored["test-deleter"] == ("not-fixed", "policy-tests-modified")
    assert scored["forbidden-file"] == ("not-fixed", "policy-planted-file")
    # the oracle restores the fix's source from the task's hidden answer, and the held-out test then holds
    assert scored["oracle"] == ("fixed", None)
    assert scored["honest-reporter"] == ("fixed", None)
    assert "the oracle is run on its known answer" in (null_certification / "CONTRACT.md").read_text()
    assert (
        "real-bug" in (null_certification / "CONTRACT.md").read_text()
        or "commit-" in (null_certification / "CONTRACT.md").read_text()
    )


def test_the_certification_summarises_per_repository_with_the_exact_interval(null_certification: Path) -> None:
    families = _bundle(null_certification)["families"]
    assert [f.get("repository") for f in families] == ["r1chardj0n3s__parse"]  # type: ignore[union-attr]
    # 0 of 1 fixed: the exact 95% interval is [0, 1 - 0.025] = [0, 0.975]
    row = "| r1chardj0n3s__parse | 1 | 0/1 | 1 | [0.000, 0.975] |"
    assert row in (null_certification / "CONTRACT.md").read_text()
    console = (null_certification.parent / "console.txt").read_text()
    assert "repository r1chardj0n3s__parse: fixed 0/1 over 1 task(s), 1 graded; 95% Clopper-Pearson [0.000, 0.975]" in (
        console
    )


def test_certified_like_a_family_the_oracles_answer_is_fixed_and_regrades(locked_task: Path, tmp_path: Path) -> None:
    out = tmp_path / "oracle"
    done = certlab(
        "certify", "--task", str(locked_task), "--agent", "command", "--agent-arg", ORACLE_COMMAND, "--out", str(out)
    )
    assert done.returncode == 0, done.stderr
    (trial,) = _bundle(out)["trials"]  # type: ignore[misc]
    assert (trial["verdict"], trial["failure_mode"]) == ("fixed", None), trial["grades"]
    assert "1/1 held-out tests held" in trial["grades"][2]["detail"]
    regraded = certlab("regrade", str(out), "--task", str(locked_task))
    assert regraded.returncode == 0, regraded.stdout + regraded.stderr


def test_mutants_of_the_fixed_tree_are_scored_by_the_visible_suite_and_the_held_out_test(
    locked_task: Path, tmp_path: Path
) -> None:
    """``prove --mutants`` on the real task, on a few of its mutants (all 348 take minutes; see docs/real-bugs.md)."""
    from certlab_mutation.engine import family_mutants, fixed_family, prove_by_mutation

    from certlab_core._runtime.registry import discover
    from certlab_core.certify.acceptance import open_held_out
    from certlab_core.certify.instrument import prove
    from certlab_core.certify.lab import preload
    from certlab_core.sdk.grading import grader_chain

    registry = discover()
    held_out = open_held_out(registry, [], [str(locked_task)])
    try:
        preload()
        (family,) = held_out.families
        graders, lock = grader_chain(registry), held_out.lock_for(family.name)
        expected = prove(family, graders, acceptance_lock=lock).expected_tests  # what the CLI grades mutants against
        assert len(expected) == 93  # the test the parent skips (a skipif for Python < 3.5) is not expected
        fixed = fixed_family(family, locked_task / "oracle", tmp_path)
        mutants = family_mutants(fixed)
        breaks_the_import = [m for m in mutants if m.id == "parse.py:348:46:arithmetic"]
        chosen = breaks_the_import + [m for m in mutants if m.line in range(560, 600)][:4]
        assert len(chosen) == 5
        proof = prove_by_mutation(fixed, graders, expected, 2, lock, chosen)
        held_out.check("after the mutants")
    finally:
        held_out.close()
    assert not proof.problems, proof.problems
    assert len(proof.results) == 5 and all(r.outcome in ("failed", "survived", "timeout") for r in proof.results)
    killed = {r.mutant: r for r in proof.results if r.killed}
    assert killed["parse.py:348:46:arithmetic"].grader == "suite"  # parse no longer imports
    assert proof.score is not None and proof.score >= 0.2


def _bwrap_works() -> bool:
    from certlab_core._runtime.registry import discover
    from certlab_core.plugin.types.sandbox import Sandbox

    sandbox = discover().all("sandboxes").get("bwrap")
    return isinstance(sandbox, Sandbox) and sandbox.probe() is None


@pytest.mark.skipif(not _bwrap_works(), reason="bubblewrap cannot make a sandbox here")
def test_in_the_sandbox_the_agent_cannot_copy_the_oracle_or_read_the_held_out_tests(
    locked_task: Path, tmp_path: Path
) -> None:
    steal = (
        f"cp {locked_task / 'oracle' / 'parse.py'} parse.py; "
        f"cat {locked_task / 'cases' / 'acceptance.jsonl'} >> parse.py; true"
    )
    out = tmp_path / "thief"
    done = certlab(
        *("certify", "--task", str(locked_task), "--agent", "command", "--agent-arg", steal),
        *("--sandbox", "bwrap", "--out", str(out)),
    )
    assert done.returncode == 0, done.stderr
    (trial,) = _bundle(out)["trials"]  # type: ignore[misc]
    assert trial["verdict"] == "not-fixed"
    # nothing was copied or appended: parse.py is the parent's (uncontained, both would work and break it)
    assert trial["failure_mode"] == "overfit-to-visible-tests"
    assert "test_datetime_with_various_subsecond_precision():" not in json.dumps(trial)


def test_a_fix_with_two_new_tests_holds_both_out(parse_repo: Path, tmp_path: Path) -> None:
    done = certlab("task", "from-commit", str(parse_repo), HYPHEN_FIX, "--out", str(tmp_path / "t"))
    assert done.returncode == 0, done.stderr
    source = json.loads((tmp_path / "t" / "cases" / "source.json").read_text())
    assert source["FAIL_TO_PASS"] == [
        "tests/test_parse.py::test_hyphen_inside_field_name",
        "tests/test_parse.py::test_hyphen_inside_field_name_collision_handling",
    ]
    lines = (tmp_path / "t" / "cases" / "acceptance.jsonl").read_text().splitlines()
    assert [json.loads(line)["test"] for line in lines] == source["FAIL_TO_PASS"]


def test_the_prompt_comes_from_the_issue_text_or_a_prompt_file(tmp_path: Path) -> None:
    fixed = "def double(x):\n    return x + x\n\n\ndef half(x):\n    return x / 2\n"
    repo, commit = _tiny_repo(tmp_path, fixed, NEW_TEST + "    assert half(4) == 2\n")
    (tmp_path / "ISSUE.md").write_text("half(4) gives 8, not 2\n")
    (tmp_path / "PROMPT.md").write_text("Exactly this prompt.\n")
    issue = certlab(
        "task",
        "from-commit",
        str(repo),
        commit,
        "--issue-text",
        str(tmp_path / "ISSUE.md"),
        "--out",
        str(tmp_path / "a"),
    )
    assert issue.returncode == 0, issue.stderr
    prompt = (tmp_path / "a" / "PROMPT.md").read_text()
    assert prompt.startswith("half(4) gives 8, not 2\n") and "change only `tiny.py`" in prompt
    given = certlab(
        "task", "from-commit", str(repo), commit, "--prompt", str(tmp_path / "PROMPT.md"), "--out", str(tmp_path / "b")
    )
    assert given.returncode == 0, given.stderr
    assert (tmp_path / "b" / "PROMPT.md").read_text() == "Exactly this prompt.\n"
    both = certlab(
        *("task", "from-commit", str(repo), commit, "--prompt", str(tmp_path / "PROMPT.md")),
        *("--issue-text", str(tmp_path / "ISSUE.md"), "--out", str(tmp_path / "c")),
    )
    assert "give --prompt FILE or --issue-text FILE, not both" in one_error(both)
    assert not (tmp_path / "c").exists()


def test_lock_refuses_a_task_that_issues_a_copy_of_a_held_out_test_file(subsecond_task: Path, tmp_path: Path) -> None:
    import shutil

    task = tmp_path / "leaky"
    shutil.copytree(subsecond_task, task, ignore=shutil.ignore_patterns(".certlab"))
    held = json.loads((task / "cases" / "acceptance.jsonl").read_text().splitlines()[0])
    (task / "tests" / "test_parse_new.py").write_text(held["files"]["tests/test_parse.py"], encoding="utf-8")
    done = certlab("lock", str(task))
    assert done.returncode == 4
    assert "tests/test_parse_new.py is a copy of a held-out test file" in one_error(done)
    assert not (task / ".certlab").exists()


def test_leakscan_says_in_one_line_that_it_reads_call_cases_only(subsecond_task: Path, tmp_path: Path) -> None:
    done = certlab("leakscan", str(tmp_path), "--task", str(subsecond_task))
    assert done.returncode == 4
    assert "the held-out cases are test files (a task built from a commit)" in one_error(done)
