"""certlab_signing.evidence on its own: a key pair, a signed folder that verifies, and what breaks it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from certlab_signing import evidence

from certlab_core.plugin import CertlabError


def signed_folder(tmp_path: Path) -> tuple[Path, Path]:
    private_key, public_key = evidence.generate_key_pair(tmp_path / "k")
    folder = tmp_path / "evidence"
    folder.mkdir()
    (folder / "bundle.json").write_text("{}")
    (folder / "CONTRACT.md").write_text("# contract\n")
    evidence.sign_folder(folder, private_key)
    return folder, public_key


def test_a_signed_certification_verifies(tmp_path: Path) -> None:
    folder, public_key = signed_folder(tmp_path)
    verified = evidence.verify_folder(folder, public_key)
    assert (verified.kind, verified.subjects) == ("certification", 2)
    assert json.loads((folder / evidence.ENVELOPE_FILE).read_text())["payloadType"] == evidence.PAYLOAD_TYPE


def test_resigning_replaces_the_envelope_and_never_lists_it(tmp_path: Path) -> None:
    folder, public_key = signed_folder(tmp_path)
    (folder / "CONTRACT.md").write_text("# contract, amended\n")
    evidence.sign_folder(folder, tmp_path / "k.key")
    assert evidence.verify_folder(folder, public_key).subjects == 2


def test_a_symlink_in_the_evidence_is_tampering(tmp_path: Path) -> None:
    folder, public_key = signed_folder(tmp_path)
    (folder / "CONTRACT.md").unlink()
    (folder / "CONTRACT.md").symlink_to(tmp_path / "k.pub")
    with pytest.raises(CertlabError, match="symlink") as refused:
        evidence.verify_folder(folder, public_key)
    assert refused.value.exit_code == 3


def test_key_paths_accept_the_prefix_or_either_file() -> None:
    expected = (Path("a/k.key"), Path("a/k.pub"))
    assert evidence.key_paths(Path("a/k")) == evidence.key_paths(Path("a/k.key")) == expected
