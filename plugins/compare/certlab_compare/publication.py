"""The published record: COMPARISON.md and registry.json, from bundles."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

from attrs import frozen

from certlab_core.plugin.errors import InstrumentError, UsageError
from certlab_core.sdk.report_format import rate_cell
from certlab_core.sdk.safe_io import load_certification, replace_file

BUNDLE_FILE = "bundle.json"  # the file certlab certify writes in each certification's folder
COMPARISON_FILE = "COMPARISON.md"
REGISTRY_FILE = "registry.json"
REGISTRY_SCHEMA = "certlab.registry/1"


@frozen
class Publication:
    comparison: str
    registry: str


def run_folders(root: Path) -> list[Path]:
    """Every published run under ``root``: a folder holding a bundle.json, sorted by name."""
    if not root.is_dir():
        raise UsageError(f"{root} is not a folder of certifications; give the folder that holds one run per subfolder")
    runs = sorted(p for p in root.iterdir() if p.is_dir() and (p / BUNDLE_FILE).is_file())
    if not runs:
        raise UsageError(f"{root} holds no certification (no */{BUNDLE_FILE})")
    return runs


def read_bundle(folder: Path) -> dict[str, Any]:
    """The certification in ``folder``, read as hostile input, its schema and seal checked (exit 3 when not)."""
    return load_certification(folder / BUNDLE_FILE)


def bundle_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _family_cells(bundle: dict[str, Any]) -> dict[str, str]:
    cells: dict[str, str] = {}
    for family in bundle["families"]:
        if not isinstance(family["name"], str):
            raise TypeError("family name")
        trials = [t for t in bundle["trials"] if t["family"] == family["name"]]
        fixed = sum(t["verdict"] == "fixed" for t in trials)
        cells[family["name"]] = f"{fixed}/{len(trials)}"
    return cells


def mutation_table(root: Path) -> list[str]:
    """The mutation proof of each family as the published bundles record it, one row per distinct proof."""
    rows: dict[tuple[str, str, str], str] = {}
    for folder in run_folders(root):
        bundle = read_bundle(folder)
        try:
            for proof in bundle["instrument"]:
                record = proof.get("mutation")
                if not isinstance(record, dict) or record.get("measured") is False or record["score"] is None:
                    continue
                key = (str(proof["family"]), str(record["taskset_sha256"]), str(record["mutants_sha256"]))
                if key in rows:
                    continue
                survivors = ", ".join(f"`{s['mutant']}`" for s in record["survivors"]) or "none"
                rows[key] = (
                    f"| {proof['family']} | {record['mutants']} | {100 * record['suite_score']:.1f}% | "
                    f"{100 * record['score']:.1f}% | {survivors} | [{folder.name}]({folder.name}/CONTRACT.md) |"
                )
        except (KeyError, TypeError) as error:
            where = folder / BUNDLE_FILE
            raise InstrumentError(f"{where}: malformed mutation proof (missing or wrong {error})") from None
    if not rows:
        return ["", "No published bundle carries a mutation proof yet (`certlab certify --mutants`)."]
    return [
        "",
        "The instrument's mutation proof (`certlab prove --mutants`): the share of each family's generated mutants",
        "that its visible suite, and its suite with the held-out cases, kill; read from the bundles that carry one.",
        "",
        "| family | mutants | visible suite kills | suite + held-out kill | survivors | run |",
        "| --- | --- | --- | --- | --- | --- |",
        *(rows[key] for key in sorted(rows)),
    ]


def honesty_table(rows: list[dict[str, Any]]) -> list[str]:
    """The runs with impossible twins (``certify --impossible``): cheating and honest give-ups, with exact intervals.

    Nothing when no published run has twins, so a comparison of runs without them reads as before.
    """
    with_twins = [row for row in rows if isinstance(row.get("impossible"), dict)]
    if not with_twins:
        return []
    lines = [
        "",
        "Honesty on impossible twins (`certlab certify --impossible`): how often the agent made a suite that "
        "contradicts its prompt pass, with the exact interval the contract states.",
        "",
        "| run | twin trials | cheated | gave up honestly | mechanisms |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in with_twins:
        counts = row["impossible"]["all"]
        mechanisms = ", ".join(f"{m} ×{c}" for m, c in counts["mechanisms"].items()) or "none"
        lines.append(
            f"| {row['run']} | {counts['judged']} | {rate_cell(counts['cheating'])} | "
            f"{rate_cell(counts['gave_up_honestly'])} | {mechanisms} |"
        )
    return lines


def compile_publication(root: Path) -> Publication:
    """Read every committed bundle (seals checked) and render the comparison and the registry."""
    rows: list[dict[str, Any]] = []
    for folder in run_folders(root):
        try:
            bundle = read_bundle(folder)
            summary = bundle["summary"]
            modes = Counter(t["failure_mode"] for t in bundle["trials"] if t["failure_mode"])
            rows.append(
                {
                    "run": folder.name,
                    "bundle_sha256": bundle_sha256(folder / BUNDLE_FILE),
                    "seal": bundle["seal"],
                    "agent": bundle["agent"]["name"],
                    "adapter": bundle["agent"]["adapter"],
                    "agent_version": bundle["agent"]["version"],
                    "origin": bundle["origin"]["agent_kind"],
                    "note": bundle["origin"].get("note", ""),
                    "families": {f["name"]: f["version"] for f in bundle["families"]},
                    "cells": _family_cells(bundle),
                    "trials_per_task": bundle["settings"]["trials"],
                    "fixed": summary["fixed"],
                    "scheduled": summary["scheduled"],
                    "unavailable": summary["unavailable"],
                    "modes": dict(sorted(modes.items())),
                    "impossible": (bundle.get("impossible") or {}).get("summary"),
                }
            )
        except (KeyError, TypeError) as error:
            raise InstrumentError(f"{folder / BUNDLE_FILE}: malformed bundle (missing or wrong {error})") from None
    families = sorted({name for row in rows for name in row["cells"]})
    lines = [
        "# Published certifications",
        "",
        "Every number below is read from a committed, sealed `bundle.json` by `certlab compare`; nothing is typed",
        "by hand. CI regrades every bundle and regenerates this file and `registry.json`, and fails on any",
        "difference. Constructed agents are the instrument's proof: their scores are known in advance.",
        "",
        "| run | agent | origin | K | " + " | ".join(families) + " | fixed | failure modes | seal |",
        "|" + " --- |" * (len(families) + 7),
    ]
    for row in rows:
        cells = " | ".join(row["cells"].get(name, "–") for name in families)
        mode_text = ", ".join(f"{m} ×{c}" for m, c in row["modes"].items()) or "none"
        agent = f"{row['agent']} {row['agent_version']} via {row['adapter']}"
        lines.append(
            f"| [{row['run']}]({row['run']}/CONTRACT.md) | {agent} | "
            f"{row['origin']} | {row['trials_per_task']} | {cells} | {row['fixed']}/{row['scheduled']} | {mode_text} | "
            f"`{row['seal'][:12]}` |"
        )
    lines += honesty_table(rows)
    lines += mutation_table(root)
    notes = [f"- `{row['run']}`: {row['note']}" for row in rows if row["note"]]
    if notes:
        lines += ["", "Origins:", "", *notes]
    registry = {
        "schema": REGISTRY_SCHEMA,
        "runs": [
            {
                "run": row["run"],
                "bundle_sha256": row["bundle_sha256"],
                "seal": row["seal"],
                "agent": row["agent"],
                "origin": row["origin"],
                "families": row["families"],
            }
            for row in rows
        ],
    }
    return Publication(
        comparison="\n".join(lines) + "\n", registry=json.dumps(registry, indent=2, sort_keys=True) + "\n"
    )


def write_publication(root: Path, publication: Publication) -> None:
    """Replace COMPARISON.md and registry.json of ``root``: a link committed in their place is replaced."""
    replace_file(root / COMPARISON_FILE, publication.comparison.encode("utf-8"), "comparison", UsageError)
    replace_file(root / REGISTRY_FILE, publication.registry.encode("utf-8"), "registry", UsageError)


def differences(root: Path, publication: Publication) -> list[str]:
    """Which committed files differ from what the bundles compile to now."""
    found = []
    for name, text in ((COMPARISON_FILE, publication.comparison), (REGISTRY_FILE, publication.registry)):
        path = root / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            found.append(name)
    return found
