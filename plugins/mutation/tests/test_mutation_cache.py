"""A measured mutation proof is kept in certlab's cache under a digest of everything that decides it: reused while
nothing changed, measured again when anything did, and a broken cache file is a miss, never an error."""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import shutil
import threading
import time
from pathlib import Path

import attrs
import pytest
from certlab_mutation import cache as mutation_cache
from certlab_mutation import engine as mutation
from certlab_mutation.cache import cache_dir, load, measured_proof, proof_key
from certlab_mutation.engine import MutationProof, verdicts_of
from test_mutation_runner import write_toy_family

from certlab_core._runtime.registry import Registry, discover
from certlab_core.certify.instrument import prove
from certlab_core.certify.lab import preload
from certlab_core.plugin.types.family import TaskFamily
from certlab_core.sdk.grading import grader_chain
from certlab_core.testing import run_certlab


@pytest.fixture(scope="module")
def registry() -> Registry:
    """The installed plugins, certlab-mutation among them."""
    return discover()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CERTLAB_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "mutation"


@pytest.fixture(scope="module")
def toy(registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> tuple[TaskFamily, list, tuple[str, ...]]:
    family = write_toy_family(tmp_path_factory.mktemp("toy"))
    graders = grader_chain(registry)
    preload()
    proof = prove(family, graders)
    assert proof.holds, proof.problems
    return family, graders, proof.expected_tests


@pytest.fixture(scope="module")
def measured(
    toy: tuple[TaskFamily, list, tuple[str, ...]], tmp_path_factory: pytest.TempPathFactory
) -> tuple[MutationProof, str, Path]:
    """The toy's mutants graded once for the module, on a miss in an empty cache of its own: (proof, key, folder).

    The tests that need a measured proof (and its stored file) copy it; only a test about grading grades again."""
    family, graders, expected = toy
    root = tmp_path_factory.mktemp("measured")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CERTLAB_CACHE_DIR", str(root))
        proof, key, cached = measured_proof(family, graders, expected, 2, None)
    folder = root / "mutation"
    assert not cached and key is not None and (folder / f"{key}.json").is_file()
    assert proof.count == 10 and proof.killed == 8
    return proof, key, folder


def test_the_cache_is_certlab_s_own_folder_and_an_environment_variable_moves_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CERTLAB_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "certlab" / "mutation"
    monkeypatch.setenv("CERTLAB_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine" / "mutation"


def test_a_measured_proof_is_reused_while_nothing_that_decides_it_changed(
    toy: tuple[TaskFamily, list, tuple[str, ...]],
    measured: tuple[MutationProof, str, Path],
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    family, graders, expected = toy
    first, key, folder = measured  # graded on a miss, and stored
    shutil.copytree(folder, cache)

    def no_grading(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a cached proof was graded again")

    monkeypatch.setattr(mutation, "prove_by_mutation", no_grading)
    again, same_key, cached = measured_proof(family, graders, expected, 2, None)
    assert cached and same_key == key
    assert verdicts_of(again.results) == verdicts_of(first.results)
    assert (again.score, again.suite_score, [m.id for m in again.survivors]) == (
        first.score,
        first.suite_score,
        [m.id for m in first.survivors],
    )
    document = mutation.mutation_document(family, again, None, same_key, cached)
    assert (document["measured"], document["source"], document["cache_key"]) == (True, "cache", key)


def test_any_change_to_the_tree_suite_cases_expected_tests_or_graders_is_a_new_key(
    toy: tuple[TaskFamily, list, tuple[str, ...]], tmp_path: Path
) -> None:
    family, graders, expected = toy
    key = proof_key(family, graders, expected, None)
    assert key == proof_key(family, graders, expected, None)  # the same inputs, the same key
    changed: dict[str, str | None] = {}
    for what, relative in (("tree", "tree/toy.py"), ("suite", "tree/tests/test_toy.py"), ("cases", "acceptance.jsonl")):
        copy = tmp_path / what
        shutil.copytree(Path(family.tree_dir).parent, copy)
        with (copy / relative).open("a") as handle:
            handle.write("\n" if what == "cases" else "# changed\n")
        moved = attrs.evolve(
            family,
            tree_dir=str(copy / "tree"),
            cases_file=str(copy / "acceptance.jsonl"),
            prompt_file=str(copy / "TASK.md"),
        )
        changed[what] = proof_key(moved, graders, expected, None)
    changed["expected"] = proof_key(family, graders, expected[:-1], None)
    changed["graders"] = proof_key(family, graders[:-1], expected, None)
    assert key not in changed.values() and len(set(changed.values())) == len(changed)


def test_a_broken_or_foreign_cache_file_is_a_miss_and_is_measured_again(
    toy: tuple[TaskFamily, list, tuple[str, ...]], measured: tuple[MutationProof, str, Path], cache: Path
) -> None:
    family, graders, expected = toy
    good, key, folder = measured
    assert key == proof_key(family, graders, expected, None)
    cache.mkdir(parents=True)
    document = json.loads((folder / f"{key}.json").read_text())
    for broken in (
        "not json {",
        json.dumps({"schema": "something else"}),
        json.dumps(dict(document, family="other")),
        json.dumps(dict(document, mutants_sha256="0" * 64)),
        json.dumps(dict(document, results=document["results"][:-1])),
        json.dumps(dict(document, mutants=[dict(m, start=str(m["start"])) for m in document["mutants"]])),
        json.dumps(dict(document, mutants=[dict(m, extra=1) for m in document["mutants"]])),
        json.dumps(dict(document, results=[dict(r, outcome="error") for r in document["results"]])),
    ):
        (cache / f"{key}.json").write_text(broken)
        assert load(key, family) is None, broken
    # a FIFO there opened for reading blocked certify for good; a symlink was followed to another file
    (cache / f"{key}.json").unlink()
    os.mkfifo(cache / f"{key}.json")
    reader = threading.Thread(target=load, args=(key, family), daemon=True)
    reader.start()
    reader.join(10)
    assert not reader.is_alive(), "reading a FIFO in the cache hung"
    (cache / f"{key}.json").unlink()
    (cache / f"{key}.json").symlink_to(folder / f"{key}.json")
    assert load(key, family) is None
    proof, _key, cached = measured_proof(family, graders, expected, 2, None)
    assert not cached and verdicts_of(proof.results) == verdicts_of(good.results)
    assert load(key, family) is not None  # measured again and kept


def test_a_proof_with_a_problem_is_not_kept(measured: tuple[MutationProof, str, Path], cache: Path) -> None:
    proof, key, _folder = measured
    mutation_cache.store(key, proof)  # kept without the problem, in this test's cache
    assert (cache / f"{key}.json").is_file()
    (cache / f"{key}.json").unlink()
    mutation_cache.store(key, attrs.evolve(proof, problems=("mutant x could not be graded",)))
    assert not (cache / f"{key}.json").exists()


def test_min_mutation_score_without_the_mutation_proof_is_a_usage_error(tmp_path: Path) -> None:
    done = run_certlab(
        "certify", "--family", "intervals", "--agent", "oracle", "--no-mutants", "--min-mutation-score", "0.9",
        "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert done.returncode == 4, done.stderr
    assert done.stderr.strip().splitlines() == [
        "certlab: error: --min-mutation-score needs the mutation proof: leave out --no-mutants"
    ]


def test_a_process_measuring_the_same_key_is_waited_for_but_not_forever(
    toy: tuple[TaskFamily, list, tuple[str, ...]], cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    family, graders, expected = toy
    key = proof_key(family, graders, expected, None)
    cache.mkdir(parents=True)
    measured = MutationProof(family.name, (), (), 0.9)
    monkeypatch.setattr(mutation, "prove_by_mutation", lambda *_a, **_k: measured)
    monkeypatch.setattr(mutation_cache, "LOCK_WAIT_S", 0.5)
    with (cache / f"{key}.lock").open("w") as other:  # another process holds the key's lock and does not finish
        fcntl.flock(other, fcntl.LOCK_EX)
        started = time.monotonic()
        proof, _key, cached = measured_proof(family, graders, expected, 2, None)
    assert proof is measured and not cached and 0.5 <= time.monotonic() - started < 5


def test_a_grader_is_keyed_on_the_file_it_was_compiled_from_and_one_without_a_file_is_never_cached(
    toy: tuple[TaskFamily, list, tuple[str, ...]], tmp_path: Path
) -> None:
    family, graders, expected = toy
    source = "def grade(request):\n    return None\n"
    (tmp_path / "loose_grader.py").write_text(source)
    spec = importlib.util.spec_from_file_location("loose_grader", tmp_path / "loose_grader.py")
    assert spec is not None and spec.loader is not None
    loose = importlib.util.module_from_spec(spec)  # loaded from a file, never put in sys.modules
    spec.loader.exec_module(loose)
    from_file = attrs.evolve(graders[-1], name="loose", grade=loose.grade)
    key = proof_key(family, [*graders, from_file], expected, None)
    assert key is not None and key != proof_key(family, graders, expected, None)
    (tmp_path / "loose_grader.py").write_text(source + "# changed\n")
    assert proof_key(family, [*graders, from_file], expected, None) != key
    namespace: dict[str, object] = {}
    exec(compile(source, "<no file>", "exec"), namespace)
    no_file = attrs.evolve(graders[-1], name="nofile", grade=namespace["grade"])
    assert proof_key(family, [*graders, no_file], expected, None) is None
