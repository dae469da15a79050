"""A descriptor's ``module:function`` references: resolved, checked in a child.

The parent never imports the code under test: references are checked in a forked child
(they must import and be callable; a toolset is built once to learn its tools), and each
trial child imports its agent itself. Modules are imported with the descriptor's folder
first on ``sys.path``.
"""

from __future__ import annotations

import hashlib
import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from attrs import frozen

from certlab_core.plugin.errors import UsageError
from certlab_core.sdk.forking import ForkedCallError, call_in_fork

CHECK_TIMEOUT_S = 60.0


@frozen
class ReferenceCheck:
    """What the child learned of one reference: an error, or the source file's sha256 (and a toolset's tools)."""

    reference: str
    error: str | None = None
    source_sha256: str | None = None
    tools: tuple[str, ...] = ()
    decisions: bool = False


def _on_path(folder: str | None) -> None:
    if folder and folder not in sys.path:
        sys.path.insert(0, folder)


def resolve(reference: str, folder: str | None = None) -> Any:
    """The object ``module:attr.attr`` names, imported with ``folder`` first on the path."""
    _on_path(folder)
    module_name, _, attribute = reference.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    return target


def source_sha256(reference: str) -> str | None:
    """sha256 of the source file of the module ``reference`` names (None when it has no file)."""
    module = sys.modules.get(reference.partition(":")[0])
    path = getattr(module, "__file__", None)
    if not path:
        return None
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _check_one(reference: str, folder: str | None, toolset_input: Mapping[str, Any] | None) -> ReferenceCheck:
    try:
        target = resolve(reference, folder)
    except ModuleNotFoundError as error:
        return ReferenceCheck(reference, error=f"does not import: no module named {error.name!r}")
    except AttributeError as error:
        return ReferenceCheck(reference, error=f"does not resolve: {error}")
    except Exception as error:
        return ReferenceCheck(reference, error=f"importing it raised {type(error).__name__}: {error}")
    if not callable(target):
        return ReferenceCheck(reference, error=f"is a {type(target).__name__}, not a function")
    sha = source_sha256(reference)
    if toolset_input is None:
        return ReferenceCheck(reference, source_sha256=sha)
    from certlab_core.plugin.types.tool_world import WorldInstance

    try:
        instance = target(dict(toolset_input), 0)
    except Exception as error:
        return ReferenceCheck(reference, error=f"building the toolset (seed 0) raised {type(error).__name__}: {error}")
    if not isinstance(instance, WorldInstance):
        return ReferenceCheck(reference, error=f"returned {type(instance).__name__}, not a WorldInstance")
    return ReferenceCheck(
        reference, source_sha256=sha, tools=tuple(sorted(instance.tools)), decisions=instance.model is not None
    )


def _check_all(
    references: Sequence[str], folder: str | None, toolset: str | None, toolset_input: Mapping[str, Any]
) -> list[ReferenceCheck]:
    return [_check_one(ref, folder, toolset_input if ref == toolset else None) for ref in references]


def check_references(
    references: Sequence[str],
    folder: str | None,
    toolset: str | None = None,
    toolset_input: Mapping[str, Any] | None = None,
) -> dict[str, ReferenceCheck]:
    """Check every reference in one forked child (the parent imports none of them)."""
    unique = list(dict.fromkeys(references))
    if not unique:
        return {}
    try:
        checks = call_in_fork(_check_all, unique, folder, toolset, dict(toolset_input or {}), timeout=CHECK_TIMEOUT_S)
    except ForkedCallError as error:
        raise UsageError(f"checking the references {', '.join(unique)} failed: {error.failure.summary}") from None
    return {check.reference: check for check in checks}


def callable_reference(reference: str, folder: str | None) -> Callable[..., Any]:
    """Resolve ``reference`` in this process (a trial child) and insist it is callable."""
    target = resolve(reference, folder)
    if not callable(target):
        raise TypeError(f"{reference} is not callable")
    found: Callable[..., Any] = target
    return found
