"""certlab bundle and replay: the sealed reproducer replays as reproduced, an edited agent does not, a forgery fails."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path

import pytest
from diagnosis_experiments import A_VS_B, run_certlab, run_experiment

TRIAL = "candidate/reserve-timeout/3"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    done, made = run_experiment(tmp_path_factory.mktemp("bundle"), A_VS_B)
    assert done.returncode == 1, done.stdout + done.stderr
    return made


@pytest.fixture(scope="module")
def reproducer(store: Path) -> Path:
    out = store.parent / "repro.json"
    made = run_certlab("bundle", str(store), TRIAL, "--out", str(out))
    assert made.returncode == 0, made.stdout + made.stderr
    assert "failure tool-fault-uncaught" in made.stdout and "certlab_retry_world/agents.py" in made.stdout
    return out


def _edited(reproducer: Path, tmp_path: Path, change: tuple[str, str], where: str = "text") -> Path:
    document = json.loads(reproducer.read_text())
    if where == "text":
        agent = document["files"][-1]
        assert agent["text"].count(change[0]) == 1
        agent["text"] = agent["text"].replace(*change)
    else:
        raw = json.dumps(document)
        assert change[0] in raw
        document = json.loads(raw.replace(*change, 1))
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(document, indent=2))
    return path


def test_the_reproducer_holds_the_recording_and_the_agent(reproducer: Path) -> None:
    document = json.loads(reproducer.read_text())
    assert document["schema"] == "certlab.repro/1" and document["trial"]["id"] == TRIAL
    assert [c["name"] for c in document["manifest"]["conditions"]] == ["reserve-timeout"]
    assert list(document["manifest"]["arms"]) == ["candidate"]
    assert [e["name"] for e in document["trial"]["events"]] == ["stock", "reserve"]
    assert document["agent"]["reference"] == "certlab_retry_world.agents:agent_b"
    assert document["agent"]["task"]["orders"]  # what the agent received, built from the world's input and seed
    assert document["files"][-1]["module"] == "certlab_retry_world.agents"


def test_the_untouched_reproducer_replays_as_reproduced(reproducer: Path) -> None:
    done = run_certlab("replay", str(reproducer))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the agent made exactly the 2 recorded calls, in order" in done.stdout
    assert "reproduced: failure tool-fault-uncaught" in done.stdout


def test_an_agent_edited_to_behave_differently_does_not_reproduce(reproducer: Path, tmp_path: Path) -> None:
    # B now gives up quietly on a timed-out reserve: the same calls, a different ending.
    edited = _edited(
        reproducer,
        tmp_path,
        (
            "def agent_b(task: Mapping[str, Any], tools: Any, rng: Any) -> dict[str, Any]:",
            "def agent_b(task: Mapping[str, Any], tools: Any, rng: Any) -> dict[str, Any]:\n"
            "    try:\n        return _agent_b(task, tools, rng)\n    except ToolTimeout:\n"
            "        return {'gave_up': True}\n\n\ndef _agent_b(task: Any, tools: Any, rng: Any) -> dict[str, Any]:",
        ),
    )
    done = run_certlab("replay", str(edited))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "included files edited since bundling: certlab_retry_world/agents.py" in done.stdout
    assert "not reproduced" in done.stdout


def test_an_agent_that_leaves_the_recording_makes_the_replay_invalid(reproducer: Path, tmp_path: Path) -> None:
    # Retrying the timed-out reserve asks for a call the recording does not have.
    edited = _edited(
        reproducer, tmp_path, ("RETRYABLE_B: tuple[type[Exception], ...] = (ToolUnavailable,)",
                               "RETRYABLE_B: tuple[type[Exception], ...] = (ToolUnavailable, ToolTimeout)")
    )  # fmt: skip
    done = run_certlab("replay", str(edited))
    assert done.returncode == 3, done.stdout + done.stderr
    assert "invalid: the agent left the recording at call #2 reserve(" in done.stdout


def test_an_agent_that_stops_early_leaves_the_recording_unconsumed(reproducer: Path, tmp_path: Path) -> None:
    before = '        tools.call("stock", sku=order["sku"])\n        try:\n            _with_retries_b('
    after = before.replace('tools.call("stock", sku=order["sku"])', "return {}")
    edited = _edited(reproducer, tmp_path, (before, after))
    done = run_certlab("replay", str(edited))
    assert done.returncode == 3 and "was not fully consumed" in done.stdout


def test_an_edited_recording_breaks_the_seal(reproducer: Path, tmp_path: Path) -> None:
    edited = _edited(reproducer, tmp_path, ('"message": "reserve timed out"', '"message": "reserve is fine"'), "raw")
    done = run_certlab("replay", str(edited))
    assert done.returncode == 3 and "the seal does not match the recording" in done.stderr


def test_live_replay_reproduces_and_the_repair_copes(reproducer: Path) -> None:
    same = run_certlab("replay", str(reproducer), "--live")
    assert same.returncode == 0, same.stdout + same.stderr
    assert "the same boundary events as recorded" in same.stdout
    repaired = run_certlab("replay", str(reproducer), "--live", "--agent", "certlab_retry_world.agents:agent_c")
    assert repaired.returncode == 1, repaired.stdout + repaired.stderr
    assert "not reproduced: success instead of failure tool-fault-uncaught" in repaired.stdout


def test_agent_without_live_and_a_missing_file_are_usage_errors(reproducer: Path, tmp_path: Path) -> None:
    done = run_certlab("replay", str(reproducer), "--agent", "x:y")
    assert done.returncode == 4 and "--agent needs --live" in done.stderr
    missing = run_certlab("replay", str(tmp_path / "nothing.json"))
    assert missing.returncode == 4 and missing.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("part", "value", "needle"),
    [
        ("agent", "baseline/clean/0", "no reference of the form module:function"),
        ("agent", [], "no reference of the form module:function"),
        ("files", 10**30, "files are not a list"),
        ("files", [{"path": "a.py"}], "files are not a list"),
        ("trial", float("nan"), "manifest slice or its trial is not a JSON object"),
        ("experiment", None, "its experiment, run or manifest_seal is missing or not text"),
        ("outcome-nan", float("nan"), "the seal does not match the recording"),
    ],
)
def test_a_resealed_reproducer_of_the_wrong_shape_is_one_line_exit_3(
    reproducer: Path, tmp_path: Path, part: str, value: object, needle: str
) -> None:
    # The seal proves a reproducer unchanged, not well formed: a hand-made one is resealed here.
    from certlab_diagnosis.bundle import bundle_seal

    document = json.loads(reproducer.read_text())
    if part == "outcome-nan":
        document["trial"]["outcome"] = value  # NaN has no canonical form: certlab never sealed it
    else:
        document[part] = value
    with contextlib.suppress(TypeError, ValueError, AttributeError):  # unsealable: the old seal stays
        document["seal"] = bundle_seal(document)
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(document))
    for live in ((), ("--live",)):
        done = run_certlab("replay", str(path), *live)
        assert done.returncode == 3, done.stdout + done.stderr
        assert done.stderr.count("\n") == 1 and needle in done.stderr, done.stderr
        assert "internal error" not in done.stderr


def test_a_hostile_reproducer_cannot_write_outside_its_folder(reproducer: Path, tmp_path: Path) -> None:
    """Replay ran the included agent as the user: its code could write anywhere (measured before the sandbox)."""
    from certlab_sandbox_bwrap.plugin import probe

    if probe() is not None:
        pytest.skip(f"no bwrap sandbox here: {probe()}")
    target = tmp_path / "written-by-the-reproducer.txt"
    edited = _edited(
        reproducer,
        tmp_path,
        (
            "def agent_b(task: Mapping[str, Any], tools: Any, rng: Any) -> dict[str, Any]:",
            "def agent_b(task: Mapping[str, Any], tools: Any, rng: Any) -> dict[str, Any]:\n"
            f"    for where in ({str(target)!r}, {str(Path.home() / '.certlab-replay-escape')!r}):\n"
            "        try:\n            open(where, 'w').write('escaped')\n        except OSError:\n            pass\n"
            "    return _agent_b(task, tools, rng)\n\n\n"
            "def _agent_b(task: Any, tools: Any, rng: Any) -> dict[str, Any]:",
        ),
    )
    done = run_certlab("replay", str(edited))
    assert "inside the sandbox bwrap" in done.stdout, done.stdout + done.stderr
    assert "the agent made exactly the 2 recorded calls, in order" in done.stdout, done.stdout + done.stderr
    assert not target.exists() and not (Path.home() / ".certlab-replay-escape").exists()


def _reading_agent(reproducer: Path, tmp_path: Path, secrets: list[Path], target: Path) -> Path:
    """The reproducer with agent_b made hostile: it crashes on any file it can read, and writes outside its folder."""
    return _edited(
        reproducer,
        tmp_path,
        (
            "def agent_b(task: Mapping[str, Any], tools: Any, rng: Any) -> dict[str, Any]:",
            "def agent_b(task: Mapping[str, Any], tools: Any, rng: Any) -> dict[str, Any]:\n"
            f"    try:\n        open({str(target)!r}, 'w').write('escaped')\n    except OSError:\n        pass\n"
            f"    for where in {[str(p) for p in secrets]!r}:\n"
            "        try:\n            seen = open(where).read()\n        except OSError:\n            continue\n"
            "        raise RuntimeError(f'read {where}: {seen[:20]}')\n"
            "    return _agent_b(task, tools, rng)\n\n\n"
            "def _agent_b(task: Any, tools: Any, rng: Any) -> dict[str, Any]:",
        ),
    )


def test_a_live_rerun_runs_the_reproducers_code_in_the_sandbox(reproducer: Path, tmp_path: Path) -> None:
    """A live re-run ran the reproducer's code as the user (measured before: it read a file of another folder
    of /tmp and an installed family's clean tree, and wrote outside its folder). Now it runs in bwrap by default."""
    from certlab_sandbox_bwrap.plugin import probe

    if probe() is not None:
        pytest.skip(f"no bwrap sandbox here: {probe()}")
    import certlab_intervals

    secret = tmp_path / "secret" / "another-trials-notes.txt"
    secret.parent.mkdir()
    secret.write_text("not the reproducer's to read\n")
    key = Path(certlab_intervals.__file__).parent / "family" / "tree" / "intervals.py"
    target = tmp_path / "written-by-the-live-rerun.txt"
    edited = _reading_agent(reproducer, tmp_path, [secret, key], target)

    contained = run_certlab("replay", str(edited), "--live")
    assert "inside the sandbox bwrap" in contained.stdout, contained.stdout + contained.stderr
    assert contained.returncode == 0, contained.stdout + contained.stderr  # it read nothing: the recorded failure
    assert "reproduced: failure tool-fault-uncaught" in contained.stdout
    assert not target.exists()

    # The same reproducer uncontained, asked for: it reads the first file and crashes, and its write lands.
    uncontained = run_certlab("replay", str(edited), "--live", "--sandbox", "none")
    assert "uncontained" in uncontained.stdout, uncontained.stdout + uncontained.stderr
    assert uncontained.returncode == 1, uncontained.stdout + uncontained.stderr
    assert "not reproduced: failure" in uncontained.stdout
    assert target.read_text() == "escaped"


def test_replay_sandbox_bwrap_without_bubblewrap_is_one_line_exit_4(reproducer: Path, tmp_path: Path) -> None:
    import os

    env = dict(os.environ, PATH=str(tmp_path))  # no bwrap on this PATH
    for live in ((), ("--live",)):
        done = run_certlab("replay", str(reproducer), *live, "--sandbox", "bwrap", env=env)
        assert done.returncode == 4, done.stdout + done.stderr
        assert done.stderr.count("\n") == 1 and "bubblewrap" in done.stderr, done.stderr
    wrong = run_certlab("replay", str(reproducer), "--sandbox", "docker")
    assert wrong.returncode == 4 and wrong.stderr.count("\n") == 1 and "is not one of" in wrong.stderr
    trial = run_certlab("replay", str(tmp_path), "--trial", "t", "--sandbox", "docker")
    assert trial.returncode == 4 and trial.stderr.count("\n") == 1 and "is not one of" in trial.stderr


@pytest.mark.parametrize(("command", "target"), [("bundle", "manifest.json"), ("minimize", "trials.jsonl")])
def test_a_reproducer_or_minimisation_written_into_its_run_store_is_refused_first(
    tmp_path: Path, command: str, target: str
) -> None:
    # Before: bundle -o RUN/manifest.json wrote the reproducer over the manifest, and minimize -o RUN/trials.jsonl
    # re-ran the trial, then wrote its result over every trial of the run.
    archived = Path(__file__).resolve().parents[3] / "tests" / "archived_stores" / "block"
    store = tmp_path / "store"
    shutil.copytree(archived, store)
    done = run_certlab(command, str(store), "candidate/reserve-timeout/0", "--out", str(store / target))
    assert done.returncode == 4, done.stdout + done.stderr
    said = f"--out {store / target}: inside {store}, whose records this command reads; write it elsewhere"
    assert done.stderr.strip().splitlines() == [f"certlab: error: {said}"] and done.stdout == ""
    for kept in archived.iterdir():
        assert (store / kept.name).read_bytes() == kept.read_bytes(), kept.name


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_an_included_file_that_is_no_regular_file_is_one_line_never_a_hang(
    store: Path, tmp_path: Path, kind: str
) -> None:
    # Before: --include x.py of a FIFO blocked the bundle for good, and of a link to /dev/zero read until the
    # machine's memory ran out (24 GB in 50 s here).
    included = tmp_path / "agent_fix.py"
    if kind == "fifo":
        os.mkfifo(included)
    else:
        included.symlink_to("/dev/zero")
    out = tmp_path / "repro.json"
    args = ("bundle", str(store), TRIAL, "--out", str(out), "--include", str(included))
    done = run_certlab(*args, timeout=60)
    assert done.returncode == 4, done.stdout + done.stderr
    said = {"fifo": "a FIFO", "device": "a device"}[kind]
    assert done.stderr.strip().splitlines() == [
        f"certlab: error: {included}: {said}, not a regular file; give the included file as a file"
    ]
    assert not out.exists()
