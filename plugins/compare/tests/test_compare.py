"""``certlab compare``: a hand edit of the published record is caught, a malformed bundle refused in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from certlab_core.sdk.canonical import sealed
from certlab_core.testing import run_certlab

# The repository's published certifications: real bundles to compile.
PUBLISHED = Path(__file__).resolve().parents[3] / "certifications"


def test_compare_check_fails_on_a_hand_edit(tmp_path: Path) -> None:
    copy = tmp_path / "certifications"
    shutil.copytree(PUBLISHED, copy)
    comparison = copy / "COMPARISON.md"
    comparison.write_text(comparison.read_text().replace("/", "|", 1))
    done = run_certlab("compare", str(copy), "--check")
    assert done.returncode == 1 and "COMPARISON.md" in done.stderr


def test_compare_refuses_a_resealed_bundle_of_the_wrong_shape_in_one_line(tmp_path: Path) -> None:
    # The seal proves a bundle unchanged, not well formed: a hand-made one can be resealed.
    folder = tmp_path / "null-all"
    folder.mkdir()
    bundle = json.loads((PUBLISHED / "null-all" / "bundle.json").read_text())
    bundle.pop("seal")
    bundle["families"][0]["name"] = None
    (folder / "bundle.json").write_text(json.dumps(sealed(bundle)))
    done = run_certlab("compare", str(tmp_path))
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and "malformed bundle (missing or wrong family name)" in done.stderr


def test_compare_is_the_compare_distributions_command() -> None:
    from certlab_core._runtime.registry import discover
    from certlab_core.plugin import Command

    assert discover().plugin_of(Command, "compare").distribution == "certlab-compare"


def test_a_link_committed_in_place_of_comparison_md_or_registry_json_is_replaced_not_written_through(
    tmp_path: Path,
) -> None:
    # Before: compare wrote through the links, over whatever file they named (a user's ~/.bashrc from a CI job).
    copy = tmp_path / "certifications"
    shutil.copytree(PUBLISHED, copy)
    victims = {name: tmp_path / f"victim-{name}" for name in ("COMPARISON.md", "registry.json")}
    for name, victim in victims.items():
        victim.write_text("precious\n")
        (copy / name).unlink()
        (copy / name).symlink_to(victim)
    done = run_certlab("compare", str(copy))
    assert done.returncode == 0, done.stdout + done.stderr
    assert all(victim.read_text() == "precious\n" for victim in victims.values())
    for name in victims:
        assert not (copy / name).is_symlink() and (copy / name).read_bytes() == (PUBLISHED / name).read_bytes()
    assert sorted(p.name for p in copy.iterdir()) == sorted(p.name for p in PUBLISHED.iterdir())
