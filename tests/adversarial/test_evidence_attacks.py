"""Attacks on the evidence after the fact, on a real certification: what catches each (seal, regrade, signature).

The cheats of the corpus act during a trial; these act on the bundle once it is written. A seal is a
sha256 anyone can recompute, so an edit that reseals passes it: regrade re-earns every verdict (a
changed verdict is a mismatch) and a signature names the changed file. ``EVIDENCE_ATTACKS`` in
corpus.py lists them for the trust table; each is asserted here.
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from certlab_signing import evidence

from certlab_core._runtime.registry import Registry
from certlab_core.certify.regrade import regrade
from certlab_core.plugin.errors import CertlabError
from certlab_core.sdk.canonical import sealed

from .corpus import EVIDENCE_ATTACKS

BUNDLE = "bundle.json"
ENVELOPE = "evidence.dsse.json"


@pytest.fixture(scope="module")
def signed(oracle_certification: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The session's oracle certification, copied and signed; and the public key."""
    folder = tmp_path_factory.mktemp("evidence") / "cert"
    shutil.copytree(oracle_certification, folder)
    key, pub = evidence.generate_key_pair(folder.parent / "signer")
    evidence.sign_folder(folder, key)
    return folder, pub


def attacked(signed: tuple[Path, Path], tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    folder = tmp_path / "cert"
    shutil.copytree(signed[0], folder)
    return folder, json.loads((folder / BUNDLE).read_text())


def write(folder: Path, bundle: dict[str, Any]) -> None:
    (folder / BUNDLE).write_text(json.dumps(bundle))


def regrade_exit(registry: Registry, folder: Path) -> int:
    try:
        return regrade(registry, folder, workers=1, progress=lambda _line: None, sandbox="none").exit_code
    except CertlabError as error:
        assert "\n" not in error.message
        return error.exit_code


def verify_exit(folder: Path, pub: Path) -> int:
    try:
        evidence.verify_folder(folder, pub)
    except CertlabError as error:
        return error.exit_code
    return 0


def test_every_attack_of_the_table_is_tried_here() -> None:
    assert {a.name for a in EVIDENCE_ATTACKS} == {
        "edit-bundle-unsealed",
        "edit-bundle-resealed",
        "symlink-path-in-bundle",
        "duplicated-trials-resealed",
        "swapped-dsse-payload",
    }


def test_an_edited_bundle_without_its_seal_is_refused(
    registry: Registry, signed: tuple[Path, Path], tmp_path: Path
) -> None:
    folder, bundle = attacked(signed, tmp_path)
    bundle["trials"][0]["verdict"] = "not-fixed"
    write(folder, bundle)
    assert regrade_exit(registry, folder) == 3
    assert verify_exit(folder, signed[1]) == 3


def test_a_resealed_edit_passes_the_seal_but_not_regrade_nor_the_signature(
    registry: Registry, signed: tuple[Path, Path], tmp_path: Path
) -> None:
    folder, bundle = attacked(signed, tmp_path)
    bundle.pop("seal", None)
    bundle["trials"][0]["verdict"] = "not-fixed"
    bundle["trials"][0]["failure_mode"] = "suite-failed"
    write(folder, sealed(bundle))
    assert regrade_exit(registry, folder) == 1  # re-earned fixed: a mismatch
    assert verify_exit(folder, signed[1]) == 3


def test_a_resealed_symlink_path_in_a_bundle_is_tampered(
    registry: Registry, signed: tuple[Path, Path], tmp_path: Path
) -> None:
    folder, bundle = attacked(signed, tmp_path)
    bundle.pop("seal", None)
    target = base64.b64encode(b"/etc/passwd").decode()
    bundle["trials"][0]["changes"].append(
        {"path": "intervals.py", "kind": "symlink", "sha256": None, "content_b64": target}
    )
    bundle["trials"][0]["changes"].append(
        {"path": "intervals.py/../../../escape.txt", "kind": "added", "sha256": None, "content_b64": target}
    )
    write(folder, sealed(bundle))
    assert regrade_exit(registry, folder) == 3
    assert not (tmp_path / "escape.txt").exists()


def test_one_trial_copied_over_the_taskset_and_resealed_is_tampered(
    registry: Registry, signed: tuple[Path, Path], tmp_path: Path
) -> None:
    folder, bundle = attacked(signed, tmp_path)
    bundle.pop("seal", None)
    bundle["trials"] = [dict(bundle["trials"][0]) for _ in bundle["trials"]]  # each copy re-earns its verdict
    write(folder, sealed(bundle))
    assert regrade_exit(registry, folder) == 3
    assert verify_exit(folder, signed[1]) == 3


def test_a_signed_envelope_with_another_payload_does_not_verify(signed: tuple[Path, Path], tmp_path: Path) -> None:
    folder, bundle = attacked(signed, tmp_path)
    other, _ = attacked(signed, tmp_path / "other")
    bundle.pop("seal", None)
    bundle["trials"][0]["verdict"] = "not-fixed"
    write(other, sealed(bundle))
    key, _ = evidence.generate_key_pair(tmp_path / "attacker")
    evidence.sign_folder(other, key)  # a statement of the edited folder, signed by another key
    envelope = json.loads((folder / ENVELOPE).read_text())
    envelope["payload"] = json.loads((other / ENVELOPE).read_text())["payload"]
    (folder / ENVELOPE).write_text(json.dumps(envelope))
    shutil.copy(other / BUNDLE, folder / BUNDLE)
    assert verify_exit(folder, signed[1]) == 3
