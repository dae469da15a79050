"""``--sign-key`` is the harness's alone: loaded once before the first trial, refused where a sandbox shows it.

A key file given with ``--sign-key``, kept outside /home, was once copied into bundle.json by
the agent; with it, a forged folder verifies against the victim's public key. Now the key is
read and parsed before the first trial and the run signs with that loaded key, never reading
the file again; a key inside a folder a sandbox binds (the work copies' temp folder, the agent
environment, what the containment shows) is refused in one line, exit 4; and with
``--sandbox none`` one warning line says that the agent could read it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import types
from pathlib import Path
from typing import Any

import pytest
from certlab_signing import evidence
from conftest import run_certlab

from certlab_core._runtime.registry import Registry, discover
from certlab_core.cli.sign_key import check_key_reach, check_sign_key, key_in_reach, sandbox_reach, sign_evidence
from certlab_core.plugin import EvidenceSigner, InstrumentError, hookimpl
from certlab_core.plugin.errors import UsageError
from certlab_core.plugin.types.sandbox import Containment
from certlab_core.sdk.containment import agent_environment_dir

bwrap_plugin = pytest.importorskip("certlab_sandbox_bwrap.plugin")
REASON = bwrap_plugin.probe()
needs_bwrap = pytest.mark.skipif(REASON is not None, reason=f"no bwrap sandbox here: {REASON}")


class ShowingContainment:
    """A contained run whose sandbox shows ``shown`` (as ``Containment.visible_paths()`` says it)."""

    contained = True
    name = "bwrap"
    note = ""

    def __init__(self, *shown: str) -> None:
        self.shown = shown

    def visible_paths(self) -> tuple[str, ...]:
        return self.shown


@pytest.fixture()
def own_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process's temp folder moved into ``tmp_path``, so that ``tmp_path`` itself is outside it."""
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    return tmp_path / "tmp"


def key_pair(folder: Path, name: str = "signer") -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return evidence.generate_key_pair(folder / name)


def test_a_key_in_any_folder_a_sandbox_shows_is_refused_in_one_line(tmp_path: Path, own_temp: Path) -> None:
    shown = tmp_path / "srv" / "keys"
    private, _public = key_pair(shown)
    loaded = evidence.load_key(private)
    with pytest.raises(UsageError) as refused:
        check_key_reach(loaded, ShowingContainment(str(tmp_path / "srv")), print)  # type: ignore[arg-type]
    assert refused.value.exit_code == 4 and "\n" not in refused.value.message
    assert f"the key is inside {tmp_path / 'srv'}, which the sandbox shows every trial" in refused.value.message
    # The work copies' parent temp folder and the agent environment are shown to every contained trial.
    reach = sandbox_reach(Containment())
    assert str(own_temp) in reach and str(agent_environment_dir()) in reach
    in_temp, _ = key_pair(own_temp / "keys")
    with pytest.raises(UsageError, match=f"the key is inside {own_temp},"):
        check_key_reach(evidence.load_key(in_temp), ShowingContainment(), print)  # type: ignore[arg-type]
    # A link from a hidden place to a shown file is the shown file.
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "link.key").symlink_to(private)
    assert key_in_reach(hidden / "link.key", [str(shown)]) == str(shown)
    assert key_in_reach(hidden / "link.key", [str(tmp_path / "sr")]) is None  # a prefix is not a parent


def test_a_key_no_sandbox_shows_is_accepted_and_uncontained_is_one_warning(tmp_path: Path, own_temp: Path) -> None:
    private, _public = key_pair(tmp_path / "vault")
    loaded = evidence.load_key(private)
    said: list[str] = []
    check_key_reach(loaded, ShowingContainment("/usr", "/etc"), said.append)  # type: ignore[arg-type]
    assert said == []
    check_key_reach(loaded, Containment(), said.append)
    assert len(said) == 1 and said[0].startswith(f"warning: --sign-key {private}: the agent runs uncontained")
    with pytest.raises(UsageError, match="the evidence it would sign"):
        check_key_reach(loaded, Containment(), said.append, evidence_folder=tmp_path)


@needs_bwrap
def test_certify_refuses_a_key_in_the_temp_folder_before_any_trial(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    in_temp = Path(tempfile.mkdtemp(dir=tempfile.gettempdir()))  # the machine's temp folder, not the test's
    request.addfinalizer(lambda: shutil.rmtree(in_temp, ignore_errors=True))
    private, _public = key_pair(in_temp / "k")
    out = tmp_path / "cert"
    done = run_certlab(
        "certify", "-f", "intervals", "-a", "oracle", "--no-mutants", "-o", str(out), "--sign-key", str(private)
    )
    assert done.returncode == 4, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "which the sandbox shows every trial" in lines[0], done.stderr
    assert not (out / "bundle.json").exists() and "prove" not in done.stderr  # nothing ran


def test_with_sandbox_none_the_key_is_loaded_once_and_a_warning_says_the_agent_could_read_it(tmp_path: Path) -> None:
    """The agent replaces the key file with an attacker's during its trials: the bundle is signed by the key loaded
    before the first trial, never by what the file holds at the end."""
    private, public = key_pair(tmp_path / "victim")
    attacker, attacker_public = key_pair(tmp_path / "attacker")
    original = private.read_bytes()
    out = tmp_path / "cert"
    swap = f"cp {attacker} {private}"
    done = run_certlab(
        "certify",
        *("-f", "intervals", "-a", "command", "--agent-arg", swap, "--no-mutants", "-w", "2"),
        *("--sandbox", "none", "-o", str(out), "--sign-key", str(private)),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    warned = [line for line in done.stderr.splitlines() if line.startswith("warning: --sign-key")]
    assert warned == [
        f"warning: --sign-key {private}: the agent runs uncontained and could read the key; "
        "run it in the sandbox, or sign the folder after the run with certlab sign"
    ]
    assert private.read_bytes() == attacker.read_bytes() != original  # the agent did replace it
    assert run_certlab("verify", str(out), "--pubkey", str(public)).returncode == 0
    assert run_certlab("verify", str(out), "--pubkey", str(attacker_public)).returncode == 3


def test_a_loaded_key_signs_without_its_file(tmp_path: Path) -> None:
    private, public = key_pair(tmp_path / "keys")
    loaded = evidence.load_key(private)
    os.unlink(private)
    folder = tmp_path / "evidence"
    folder.mkdir()
    (folder / "bundle.json").write_text("{}")
    signed = evidence.sign_folder(folder, loaded)
    assert signed.keyid == loaded.keyid and evidence.verify_folder(folder, public).subjects == 1
    assert "BEGIN" not in repr(loaded)  # the key never shows in a log line


# --------------------------------------------------------------------------- signers come through a hook


def signer_module(*signers: Any) -> types.ModuleType:
    """An in-process plugin providing ``signers`` through ``certlab_evidence_signers``."""
    module = types.ModuleType("odd_signers")

    @hookimpl
    def certlab_evidence_signers() -> list[EvidenceSigner]:
        return list(signers)

    module.certlab_evidence_signers = certlab_evidence_signers  # type: ignore[attr-defined]
    return module


def registry_with(*signers: Any, signing: bool = False) -> Registry:
    registry = discover(only=("signing",) if signing else ())
    registry.add_plugin(signer_module(*signers), "odd-signers", "odd-signers", "1")
    return registry


class HeldKey:
    def __init__(self, path: Path) -> None:
        self.path = path


def seal(folder: Path, key: HeldKey) -> str:
    (folder / "SEAL").write_text(str(key.path))
    return f"sealed {folder}"


def test_the_dsse_signer_is_certlab_signings_record_and_the_kernel_loads_no_plugin_by_name(tmp_path: Path) -> None:
    # Before, --sign-key imported certlab_signing.evidence by its name; now the signer is a record like any other.
    private, public = key_pair(tmp_path / "keys")
    loaded = check_sign_key(discover(only=("signing",)), private)
    assert loaded is not None and loaded.signer.name == "dsse" and loaded.path == private.resolve()
    folder = tmp_path / "evidence"
    folder.mkdir()
    (folder / "bundle.json").write_text("{}")
    assert sign_evidence(folder, loaded).startswith(f"signed: {folder / 'evidence.dsse.json'} (1 files, key ")
    assert evidence.verify_folder(folder, public).subjects == 1


def test_a_third_partys_signer_signs_what_a_run_wrote(tmp_path: Path) -> None:
    (tmp_path / "k").write_text("secret")
    registry = registry_with(EvidenceSigner(name="seal", description="seal", load_key=HeldKey, sign_folder=seal))
    loaded = check_sign_key(registry, tmp_path / "k")
    assert loaded is not None and sign_evidence(tmp_path, loaded) == f"sealed {tmp_path}"
    assert (tmp_path / "SEAL").read_text() == str(tmp_path / "k")
    assert check_sign_key(registry, None) is None  # no --sign-key: no signer is asked for


def test_sign_key_without_a_signer_or_with_two_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"^--sign-key needs an evidence signer; pip install certlab-signing$"):
        check_sign_key(discover(only=("intervals",)), tmp_path / "k")
    two = registry_with(EvidenceSigner(name="seal", description="s", load_key=HeldKey, sign_folder=seal), signing=True)
    with pytest.raises(UsageError, match=r"2 evidence signers are installed \(dsse, seal\); leave all but one out"):
        check_sign_key(two, tmp_path / "k")
    done = run_certlab(
        "certify",
        "-f",
        "intervals",
        "-a",
        "oracle",
        "-o",
        str(tmp_path / "cert"),
        "--sign-key",
        str(tmp_path / "k"),
        env={**os.environ, "CERTLAB_PLUGINS": "intervals,calibration,policy,suite,acceptance,sandbox-none"},
    )
    assert (
        done.returncode == 4
        and done.stderr == "certlab: error: --sign-key needs an evidence signer; pip install certlab-signing\n"
    ), done.stderr
    assert not (tmp_path / "cert").exists()


def test_a_signer_that_crashes_hangs_or_answers_the_wrong_type_is_named_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def crashes(_path: Path) -> HeldKey:
        raise OSError("the token is unplugged")

    broken = registry_with(EvidenceSigner(name="seal", description="s", load_key=crashes, sign_folder=seal))
    with pytest.raises(InstrumentError, match=r"^the evidence signer seal's load_key raised OSError: the token is"):
        check_sign_key(broken, tmp_path / "k")
    pathless = registry_with(EvidenceSigner(name="seal", description="s", load_key=lambda p: "key", sign_folder=seal))
    with pytest.raises(InstrumentError, match=r"^the evidence signer seal's load_key returned str, with no path$"):
        check_sign_key(pathless, tmp_path / "k")
    silent = registry_with(EvidenceSigner(name="seal", description="s", load_key=HeldKey, sign_folder=lambda f, k: 0))
    loaded = check_sign_key(silent, tmp_path / "k")
    assert loaded is not None
    with pytest.raises(InstrumentError, match=r"^the evidence signer seal's sign_folder returned int, not a line$"):
        sign_evidence(tmp_path, loaded)

    def never_returns(*_args: object) -> HeldKey:
        while True:
            time.sleep(0.05)

    # Before: a load_key that never returned held certify before its first trial for good, and a sign_folder that
    # never returned held it after its last.
    monkeypatch.setenv("CERTLAB_PLUGIN_LOAD_S", "1")
    hung = registry_with(EvidenceSigner(name="seal", description="s", load_key=never_returns, sign_folder=seal))
    late = r"did not return within 1 s \(CERTLAB_PLUGIN_LOAD_S sets the wait\)$"
    with pytest.raises(InstrumentError, match=rf"^the evidence signer seal's load_key {late}"):
        check_sign_key(hung, tmp_path / "k")
    stuck = registry_with(EvidenceSigner(name="seal", description="s", load_key=HeldKey, sign_folder=never_returns))
    loaded = check_sign_key(stuck, tmp_path / "k")
    assert loaded is not None
    with pytest.raises(InstrumentError, match=rf"^the evidence signer seal's sign_folder {late}"):
        sign_evidence(tmp_path, loaded)

    def refuses(path: Path) -> HeldKey:
        raise UsageError(f"{path}: not a key of mine")

    refusing = registry_with(EvidenceSigner(name="seal", description="s", load_key=refuses, sign_folder=seal))
    with pytest.raises(UsageError, match="not a key of mine"):  # a refusal the signer means goes on as it is
        check_sign_key(refusing, tmp_path / "k")
