"""Signed evidence: keygen, sign and verify, and what a signature tells that a seal cannot (docs/trust-model.md)."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest
from certlab_signing import evidence

from certlab_core.gate.store import DECISION, TRIALS, seal_line
from certlab_core.plugin.errors import CertlabError
from certlab_core.testing import run_certlab

ENVELOPE = "evidence.dsse.json"
# A retry-world experiment whose candidate always loses an order: a BLOCK run store of 3 files.
BLOCK_EXPERIMENT = """\
schema: certlab.experiment/1
experiment: signed-block
task:
  world: retry-inventory
  input: {orders: 3, existing_share: 0.0, flaky_confirm_rate: 0.05}
oracle: world
arms:
  baseline: {agent: "certlab_retry_world.agents:agent_a", label: A}
  candidate: {agent: "certlab_retry_world.agents:agent_b", label: B}
conditions:
  - name: reserve-timeout
    bucket: falsify
    faults: [{fault: tool_timeout, tool: reserve, on_calls: [1]}]
rule: {name: clopper-pearson, alpha: 0.05, delta: 0.1, looks: 1}
n_per_arm: 10
seed: 7
budgets: {tool_calls: 60, model_steps: 10, seconds: 10}
"""


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("keys")
    done = run_certlab("keygen", str(folder / "signer"))
    assert done.returncode == 0, done.stderr
    return folder / "signer.key", folder / "signer.pub"


@pytest.fixture(scope="module")
def block_store(tmp_path_factory: pytest.TempPathFactory, keys: tuple[Path, Path]) -> Path:
    """A real BLOCK run store, signed as it was written (``run --sign-key``)."""
    folder = tmp_path_factory.mktemp("block")
    path = folder / "certlab.yaml"
    path.write_text(BLOCK_EXPERIMENT, encoding="utf-8")
    done = run_certlab("run", str(path), "--out", str(folder / "runs"), "-q", "--sign-key", str(keys[0]))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "signed: " in done.stdout
    # A tool world's agents run in the harness's own processes: the key is in their reach, and the run says so.
    assert f"warning: --sign-key {keys[0]}: the agent runs uncontained and could read the key" in done.stderr
    return Path(next(line for line in done.stdout.splitlines() if line.startswith("run: "))[5:])


def copy_folder(source: Path, target: Path) -> Path:
    target.mkdir()
    for item in source.iterdir():
        (target / item.name).write_bytes(item.read_bytes())
    return target


def test_keygen_writes_a_private_key_only_its_owner_reads_and_never_replaces_one(tmp_path: Path) -> None:
    done = run_certlab("keygen", str(tmp_path / "k"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "k.key").stat().st_mode & 0o777 == 0o600
    public = json.loads((tmp_path / "k.pub").read_text())
    assert public["keytype"] == "ed25519" and len(bytes.fromhex(public["keyval"]["public"])) == 32
    again = run_certlab("keygen", str(tmp_path / "k"))
    assert again.returncode == 4 and "already exists" in again.stderr


@pytest.mark.parametrize("name", ["", "/", ".key", "keys/.pub"])
def test_keygen_refuses_a_path_that_names_no_key_pair_in_one_line(tmp_path: Path, name: str) -> None:
    # Before: '' and '/' raised ValueError from pathlib ("has an empty name"), exit 3.
    done = run_certlab("keygen", name, cwd=tmp_path)
    assert done.returncode == 4, done.stderr
    said = f"{str(Path(name))!r} names no key pair; give it a name, e.g. certlab keygen keys/release"
    assert done.stderr == f"certlab: error: {said}\n"
    assert list(tmp_path.iterdir()) == []


def test_a_signed_run_store_verifies_and_lists_every_file(block_store: Path, keys: tuple[Path, Path]) -> None:
    done = run_certlab("verify", str(block_store), "--pubkey", str(keys[1]))
    assert done.returncode == 0, done.stderr
    assert "run-store, 3 files" in done.stdout
    envelope = json.loads((block_store / ENVELOPE).read_text())
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    statement = json.loads(base64.b64decode(envelope["payload"]))
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert sorted(s["name"] for s in statement["subject"]) == [DECISION, "manifest.json", TRIALS]


def test_the_private_key_never_enters_the_evidence(block_store: Path, keys: tuple[Path, Path]) -> None:
    secret = keys[0].read_bytes()
    body = b"".join(line for line in secret.splitlines() if not line.startswith(b"-----"))
    for item in block_store.iterdir():
        data = item.read_bytes()
        assert body not in data and base64.b64decode(body) not in data and secret not in data


def test_resealed_block_lines_pass_the_gate_but_not_the_signature(
    block_store: Path, keys: tuple[Path, Path], tmp_path: Path
) -> None:
    """The measured failure: a forger who flips a BLOCK store's failures and reseals them moves the gate's verdict
    (on a larger store, to PASS) with no ERROR: a seal is an integrity check anyone can recompute; only the
    signature tells."""
    forged = copy_folder(block_store, tmp_path / "forged")
    lines = []
    for raw in (forged / TRIALS).read_text().splitlines():
        line = json.loads(raw)
        if line["outcome"] == "failure":
            line.update(outcome="success", failure_mode=None)
            line["oracle"] = {"passed": True, "detail": "forged"}
        lines.append(seal_line(line))
    (forged / TRIALS).write_text("".join(lines))
    (forged / DECISION).unlink()
    gate = run_certlab("gate", str(forged))
    assert gate.returncode == 2 and "problem:" not in gate.stdout  # every seal holds: BLOCK became INCONCLUSIVE
    verify = run_certlab("verify", str(forged), "--pubkey", str(keys[1]))
    assert verify.returncode == 3
    assert f"changed {TRIALS}" in verify.stderr and f"removed {DECISION}" in verify.stderr
    assert len(verify.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("change", ["changed", "added", "removed", "other-key", "bad-signature"])
def test_verify_fails_on_each_kind_of_tampering(
    change: str, block_store: Path, keys: tuple[Path, Path], tmp_path: Path
) -> None:
    folder = copy_folder(block_store, tmp_path / "copy")
    pubkey = keys[1]
    if change == "changed":
        with (folder / "manifest.json").open("a") as handle:
            handle.write(" ")
    elif change == "added":
        (folder / "notes.txt").write_text("planted")
    elif change == "removed":
        (folder / TRIALS).unlink()
    elif change == "other-key":
        evidence.generate_key_pair(tmp_path / "other")
        pubkey = tmp_path / "other.pub"
    else:
        envelope = json.loads((folder / ENVELOPE).read_text())
        signature = bytearray(base64.b64decode(envelope["signatures"][0]["sig"]))
        signature[0] ^= 1
        envelope["signatures"][0]["sig"] = base64.b64encode(bytes(signature)).decode()
        (folder / ENVELOPE).write_text(json.dumps(envelope))
    message = refusal(folder, pubkey, 3)
    expected = {"changed": "changed manifest.json", "added": "added notes.txt", "removed": f"removed {TRIALS}"}
    assert expected.get(change, "the signature does not verify") in message


def refusal(folder: Path, pubkey: Path, exit_code: int) -> str:
    """The one-line refusal of verifying ``folder`` (the CLI prints it as ``certlab: error: ...``)."""
    with pytest.raises(CertlabError) as refused:
        evidence.verify_folder(folder, pubkey)
    assert refused.value.exit_code == exit_code
    assert "\n" not in refused.value.message
    return refused.value.message


def _fifo(path: Path) -> None:
    os.mkfifo(path)


@pytest.mark.parametrize(
    "hostile",
    ["fifo", "huge", "not-json", "deep", "wrong-shape", "bad-base64", "statement-shape", "symlink"],
)
def test_a_hostile_envelope_is_refused_in_one_line(
    hostile: str, block_store: Path, keys: tuple[Path, Path], tmp_path: Path
) -> None:
    folder = copy_folder(block_store, tmp_path / "copy")
    envelope = folder / ENVELOPE
    envelope.unlink()
    if hostile == "fifo":
        _fifo(envelope)
    elif hostile == "huge":
        with envelope.open("wb") as handle:
            handle.truncate(17 << 20)
    elif hostile == "not-json":
        envelope.write_bytes(b"\xff\xfe{")
    elif hostile == "deep":
        envelope.write_text("[" * 100_000 + "]" * 100_000)
    elif hostile == "wrong-shape":
        envelope.write_text(json.dumps({"payload": 1, "payloadType": [], "signatures": {}}))
    elif hostile == "bad-base64":
        document = json.loads((block_store / ENVELOPE).read_text())
        document["payload"] = "!!!not base64!!!"
        envelope.write_text(json.dumps(document))
    elif hostile == "statement-shape":
        envelope.write_text((block_store / ENVELOPE).read_text())  # a good signature over a good payload...
        (folder / "x").mkdir()  # ...and a folder the signature never listed, with a FIFO in it
        _fifo(folder / "x" / "pipe")
    else:
        envelope.symlink_to(block_store / ENVELOPE)
    refusal(folder, keys[1], 3)


def test_a_folder_without_a_signature_is_not_verified(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    (tmp_path / "bundle.json").write_text("{}")
    assert "not signed" in refusal(tmp_path, keys[1], 3)


def test_usage_errors_are_exit_4(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    (tmp_path / "ev").mkdir()
    (tmp_path / "ev" / "a.txt").write_text("a")
    refusal(tmp_path / "nowhere", keys[1], 4)
    refusal(tmp_path / "ev", keys[0], 4)  # a private key is not a public key
    for folder, key in ((tmp_path / "ev", keys[1]), (tmp_path / "nowhere", keys[0])):  # nor the other way round
        with pytest.raises(CertlabError) as refused:
            evidence.sign_folder(folder, key)
        assert refused.value.exit_code == 4 and "\n" not in refused.value.message
    done = run_certlab("verify", str(tmp_path / "ev"), "--pubkey", str(tmp_path / "missing.pub"))
    assert done.returncode == 4 and len(done.stderr.strip().splitlines()) == 1


def test_sign_refuses_a_private_key_inside_the_evidence(tmp_path: Path) -> None:
    folder = tmp_path / "ev"
    folder.mkdir()
    (folder / "a.txt").write_text("a")
    evidence.generate_key_pair(folder / "inside")
    with pytest.raises(CertlabError, match="inside"):
        evidence.sign_folder(folder, folder / "inside.key")
    assert not (folder / ENVELOPE).exists()


def test_sign_then_verify_a_folder_with_sub_folders(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    folder = tmp_path / "ev"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("a")
    (folder / "sub" / "b.txt").write_text("b")
    signed = run_certlab("sign", str(folder), "--key", str(keys[0]))
    assert signed.returncode == 0 and "2 files" in signed.stdout
    assert evidence.verify_folder(folder, keys[1]).subjects == 2
    (folder / "sub" / "b.txt").write_text("B")
    assert "changed sub/b.txt" in refusal(folder, keys[1], 3)


def test_keygen_sign_and_verify_are_the_signing_distributions_commands() -> None:
    from certlab_core._runtime.registry import discover
    from certlab_core.plugin import Command

    registry = discover()
    providers = {name: registry.plugin_of(Command, name).distribution for name in ("keygen", "sign", "verify")}
    assert providers == dict.fromkeys(("keygen", "sign", "verify"), "certlab-signing")
