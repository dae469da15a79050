"""A reproducer: one sealed file with a trial, its manifest slice, its agent.

``certlab bundle RUNDIR TRIAL --out repro.json`` writes it; ``certlab replay repro.json``
runs the included agent again against the recorded boundary events. The file holds:

- ``manifest``: the slice of the sealed manifest this trial depends on (experiment, task,
  oracle, the trial's arm and condition, rule, budgets, contract, plugins, seed); rebuilding
  a manifest from it gives the trial the same identity hash, which replay checks;
- ``trial``: the trial's recorded line (events, faults, outcome, seal) as it is in trials.jsonl;
- ``agent``: the agent's reference, the task it received (built from the world's input and
  the trial's seed) and its random seed;
- ``files``: the agent's source module and any ``--include`` files, as text with the module
  name each is loaded as and the sha256 they had when bundled.

The seal covers everything but the files' text (their bundled sha256 is sealed): the
recording is evidence and must not change, while the included agent code is what a
developer edits to try a fix; replay says which included files differ from the bundled ones.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from certlab_core.plugin.errors import InstrumentError, UsageError
from certlab_core.sdk import safe_io
from certlab_core.sdk.canonical import pretty_json, seal_holds, seal_of

if TYPE_CHECKING:
    from certlab_core.plugin import Services
    from certlab_core.plugin.types.services import StoreView

BUNDLE_SCHEMA = "certlab.repro/1"
SLICE_KEYS = (
    "experiment",
    "descriptor_file",
    "descriptor_sha256",
    "descriptor_dir",
    "task",
    "oracle",
    "rule",
    "n_per_arm",
    "seed",
    "budgets",
    "contract",
    "infra_exit_codes",
    "plugins",
    "certlab_version",
)
MAX_INCLUDED_BYTES = 2_000_000


def manifest_slice(manifest_document: Mapping[str, Any], arm: str, condition: str) -> dict[str, Any]:
    """The part of a manifest document one trial depends on: its arm and condition, and everything shared."""
    piece = {key: manifest_document[key] for key in SLICE_KEYS}
    piece["arms"] = {arm: manifest_document["arms"][arm]}
    piece["conditions"] = [c for c in manifest_document["conditions"] if c["name"] == condition]
    return piece


def manifest_from_slice(piece: Mapping[str, Any], arm_overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A sealed manifest document rebuilt from a slice (the other arm mirrors this one), for the kernel's services.

    The services check it as they check manifest.json (``read_bundle`` has them check it first).
    """
    from certlab_core.sdk.looks import look_sizes

    document = {key: piece[key] for key in SLICE_KEYS}
    (entry,) = piece["arms"].values()
    entry = {**entry, **(arm_overrides or {})}
    document["schema"] = "certlab.manifest/1"
    document["arms"] = {"baseline": entry, "candidate": entry}
    document["conditions"] = list(piece["conditions"])
    document["schedule"] = {
        "order": "interleaved",
        "look_sizes": list(look_sizes(piece["n_per_arm"], piece["rule"]["looks"])),
        "gating_conditions": sum(1 for c in piece["conditions"] if c["gating"]),
    }
    document["seal"] = seal_of(document)
    return document


# --------------------------------------------------------------------------- included files


def _module_file(module_name: str, folder: str | None) -> Path | None:
    """The source file of ``module_name`` as the runner would import it (descriptor folder first), unimported."""
    added = bool(folder) and folder not in sys.path
    if added:
        sys.path.insert(0, str(folder))
    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        spec = None
    finally:
        if added:
            sys.path.remove(str(folder))
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


def _module_name_of(path: Path, folder: str | None) -> str:
    """The module name a file is imported as: relative to the descriptor folder or a sys.path entry, else its stem."""
    resolved = path.resolve()
    roots = ([Path(folder)] if folder else []) + [Path(p) for p in sys.path if p]
    for root in roots:
        try:
            relative = resolved.relative_to(root.resolve())
        except (ValueError, OSError):
            continue
        parts = list(relative.with_suffix("").parts)
        if parts and parts[-1] == "__init__":
            parts = parts[:-1]
        if parts and all(part.isidentifier() for part in parts):
            return ".".join(parts)
    return path.stem


def included_file(path: Path, module: str) -> dict[str, Any]:
    """An included source file: a regular file read up to its cap (a FIFO named ``x.py`` blocked the read for good,
    and a link to ``/dev/zero`` read until memory ran out)."""
    try:
        with safe_io.opened_regular(path, "included file", UsageError, f"--include {path}: no such file") as handle:
            data = handle.read(MAX_INCLUDED_BYTES + 1)
    except OSError as error:
        raise UsageError(f"--include {path}: cannot read it ({error.strerror})") from None
    if len(data) > MAX_INCLUDED_BYTES:
        raise UsageError(
            f"--include {path}: over {MAX_INCLUDED_BYTES} bytes; a reproducer includes source files, not data"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"--include {path}: not UTF-8 text; include source files only") from None
    relative = module.replace(".", "/") + ("/__init__.py" if path.name == "__init__.py" else ".py")
    return {"module": module, "path": relative, "sha256": hashlib.sha256(data).hexdigest(), "text": text}


# --------------------------------------------------------------------------- writing and reading


def make_bundle(
    store: StoreView, trial: Mapping[str, Any], services: Services, include: Sequence[Path]
) -> dict[str, Any]:
    """The sealed reproducer of one trial line of ``store``."""
    manifest = store.manifest
    if manifest["task"]["kind"] != "tool-world":
        raise UsageError(
            f"{trial['id']} is a coding trial (task family {manifest['task']['family']}); reproducers replay a tool "
            "boundary, so bundle a tool-world trial"
        )
    arm = manifest["arms"][trial["arm"]]
    if not arm.get("agent"):
        raise UsageError(f"{trial['id']}: its arm runs an adapter, not a Python agent; only Python agents replay")
    reference = str(arm["agent"])
    module_name = reference.partition(":")[0]
    source = _module_file(module_name, manifest["descriptor_dir"])
    if source is None:
        raise UsageError(
            f"the agent module {module_name} has no source file to include; "
            "install it, or run from the descriptor's folder"
        )
    files = [included_file(source, module_name)]
    if arm.get("source_sha256") and files[0]["sha256"] != arm["source_sha256"]:
        raise UsageError(
            f"{source} changed since the run (its sha256 differs from the sealed one); the bundle would not hold the "
            "agent that ran: restore that version first"
        )
    extra: list[dict[str, Any]] = []
    for path in include:
        if path.suffix != ".py":
            raise UsageError(f"--include {path}: only Python source files are included (replay loads them as modules)")
        name = _module_name_of(path, manifest["descriptor_dir"])
        if name != module_name and all(f["module"] != name for f in extra):
            extra.append(included_file(path, name))
    document = {
        "schema": BUNDLE_SCHEMA,
        "experiment": manifest["experiment"],
        "run": store.folder.name,
        "manifest_seal": manifest["seal"],
        "manifest": manifest_slice(manifest, trial["arm"], trial["condition"]),
        "trial": dict(trial),
        "agent": {
            "reference": reference,
            "task": services.agent_task(manifest, int(trial["seed"])),
            "rng_seed": int(trial["seed"]),
        },
        "files": extra + files,  # loaded in this order on replay: helpers first, the agent's module last
    }
    document["seal"] = bundle_seal(document)
    return document


def bundle_seal(document: Mapping[str, Any]) -> str:
    """The seal of a reproducer: everything but the seal itself and the included files' text."""
    body = {key: value for key, value in document.items() if key != "seal"}
    body["files"] = [{k: v for k, v in entry.items() if k != "text"} for entry in document.get("files") or ()]
    return seal_of(body)


def edited_files(document: Mapping[str, Any]) -> list[str]:
    """The included files whose text no longer has the sha256 they were bundled with."""
    return [
        str(entry["path"])
        for entry in document["files"]
        if hashlib.sha256(str(entry["text"]).encode("utf-8")).hexdigest() != entry["sha256"]
    ]


def write_bundle(path: Path, bundle: Mapping[str, Any], rundir: Path) -> None:
    """Write the reproducer ``bundle`` to ``path``, never into the run store ``rundir`` it was made from."""
    safe_io.write_output(path, pretty_json(dict(bundle)), records=rundir)


def _shape_problem(document: Mapping[str, Any]) -> str | None:
    """What is missing or of the wrong type in a reproducer's top level (None when its shape is right).

    The seal proves a reproducer unchanged, not well formed: a hand-made one can be resealed.
    """
    if not all(isinstance(document.get(key), str) for key in ("experiment", "run", "manifest_seal")):
        return "its experiment, run or manifest_seal is missing or not text"
    if not isinstance(document.get("manifest"), dict) or not isinstance(document.get("trial"), dict):
        return "its manifest slice or its trial is not a JSON object"
    agent = document.get("agent")
    if not isinstance(agent, dict) or not isinstance(agent.get("reference"), str) or ":" not in agent["reference"]:
        return "its agent has no reference of the form module:function"
    seed = agent.get("rng_seed")
    if not isinstance(seed, int) or isinstance(seed, bool) or "task" not in agent:
        return "its agent has no whole-number rng_seed or no task"
    files = document.get("files")
    if not isinstance(files, list) or not all(
        isinstance(entry, dict) and all(isinstance(entry.get(key), str) for key in ("path", "module", "text", "sha256"))
        for entry in files
    ):
        return "its files are not a list of {path, module, text, sha256} strings"
    for entry in files:
        if entry["path"] not in module_paths(entry["module"]):
            return (
                f"its included file {entry['path']!r} is not where its module {entry['module']!r} lives "
                "(a path is the module's dotted name as folders: never absolute, never '..'); it was tampered with"
            )
    return None


def module_paths(module: str) -> tuple[str, ...]:
    """The relative paths a module's source may have in a reproducer: ``a/b.py`` or ``a/b/__init__.py`` for ``a.b``."""
    parts = module.split(".")
    if not all(part and not set(part) & set("/\\\0") for part in parts):
        return ()
    base = "/".join(parts)
    return (f"{base}.py", f"{base}/__init__.py")


def read_bundle(path: Path, services: Services) -> dict[str, Any]:
    """A reproducer read back, its schema, seal, trial seal and identity checked; anything wrong is exit 3."""
    from certlab_core.sdk.safe_io import load_json

    # Absent is a usage error (exit 4); present but not a readable reproducer is invalid (exit 3).
    missing = f"{path}: no such reproducer; write one with 'certlab bundle RUNDIR TRIAL --out'"
    if not path.exists():
        raise UsageError(missing)
    document = load_json(path, "reproducer", InstrumentError, missing)
    if not isinstance(document, dict) or document.get("schema") != BUNDLE_SCHEMA:
        raise InstrumentError(f"{path}: not a {BUNDLE_SCHEMA} reproducer")
    shape = _shape_problem(document)
    if shape is not None:
        raise InstrumentError(f"{path}: {shape}; the reproducer is damaged")
    try:
        holds = document.get("seal") == bundle_seal(document)
    except (TypeError, ValueError):  # content with no canonical form (NaN...) was never sealed by certlab
        holds = False
    if not holds:
        raise InstrumentError(
            f"{path}: the seal does not match the recording; the reproducer was edited after sealing "
            "(only the included files' text may change)"
        )
    try:
        trial = document["trial"]
        if not seal_holds(trial):
            raise InstrumentError(f"{path}: the trial's own seal does not match its record")
        manifest = manifest_from_slice(document["manifest"])
        services.check_manifest(manifest, "the reproducer's manifest slice")
        identity = services.trial_identity(manifest, trial["id"])
        if identity is None or identity != trial["identity"]:
            raise InstrumentError(f"{path}: the manifest slice does not give the trial its recorded identity")
        for entry in document["files"]:
            if not isinstance(entry["text"], str) or not isinstance(entry["module"], str):
                raise InstrumentError(f"{path}: an included file has no text or module name; it is damaged")
    except (KeyError, TypeError, AttributeError, ValueError) as error:
        raise InstrumentError(f"{path}: the reproducer lacks {error}; it is damaged") from None
    return document
