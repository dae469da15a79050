"""Plugin discovery (stevedore over ``certlab.plugins``) and the per-kind index of what plugins provide."""

from __future__ import annotations

import importlib.metadata
import inspect
import os
import types
from collections.abc import Iterable, Sequence
from typing import Any

import pluggy

from certlab_core.plugin import hookspecs
from certlab_core.plugin.errors import UsageError
from certlab_core.plugin.known import KNOWN_PROVIDERS
from certlab_core.plugin.records import PluginFailure, PluginInfo

ENTRY_POINT_GROUP = "certlab.plugins"
ONLY_ENV = "CERTLAB_PLUGINS"
HOOK_PREFIX = "certlab_"

# The record kinds: every spec ``certlab_<kind>`` that returns a list of named records.
KINDS: tuple[str, ...] = tuple(
    name[len(HOOK_PREFIX) :]
    for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
    if name.startswith(HOOK_PREFIX) and str(fn.__annotations__.get("return", "")).startswith("list[")
)


def _singular(kind: str) -> str:
    words = kind.replace("_", " ")
    return words[:-3] + "y" if words.endswith("ies") else words.removesuffix("s")


KIND_LABELS = {kind: _singular(kind) for kind in KINDS}


def new_plugin_manager() -> pluggy.PluginManager:
    """A plugin manager that knows certlab's hook specs and no plugin yet."""
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    return pm


def _declared_plugins() -> list[tuple[str, str, str, str]]:
    """Every entry point of the group, as (name, value, distribution, version), from installed metadata."""
    found: list[tuple[str, str, str, str]] = []
    for dist in importlib.metadata.distributions():
        for ep in dist.entry_points:
            if ep.group == ENTRY_POINT_GROUP:
                found.append((ep.name, ep.value, dist.metadata["Name"] or "?", dist.version or "?"))
    return found


def _refuse_duplicate_names(declared: list[tuple[str, str, str, str]], wanted: set[str] | None) -> None:
    by_name: dict[str, list[str]] = {}
    for name, _value, dist, version in declared:
        if wanted is None or name in wanted:
            by_name.setdefault(name, []).append(f"{dist} {version}")
    for name, dists in sorted(by_name.items()):
        if len(dists) > 1:
            raise UsageError(
                f"two distributions declare the certlab plugin {name!r}: {' and '.join(sorted(dists))}; "
                "uninstall one of them"
            )


class Registry:
    """The loaded plugins and, per kind, the records they provide indexed by name."""

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self.pm = pm
        self.failures: list[PluginFailure] = []
        self._sources: dict[str, tuple[str, str]] = {}  # plugin name -> (distribution, version)
        self._index: dict[str, dict[str, tuple[Any, str]]] | None = None

    # ------------------------------------------------------------------ loading

    def add_plugin(self, module: object, name: str, distribution: str, version: str) -> None:
        """Register one plugin module (what discovery does for each entry point)."""
        self.pm.register(module, name=name)
        self._sources[name] = (distribution, version)
        self._index = None

    def _build_index(self) -> dict[str, dict[str, tuple[Any, str]]]:
        index: dict[str, dict[str, tuple[Any, str]]] = {}
        for kind in KINDS:
            by_name: dict[str, tuple[Any, str]] = {}
            caller = getattr(self.pm.hook, HOOK_PREFIX + kind)
            for impl in reversed(caller.get_hookimpls()):
                records = impl.function() or []
                for record in records:
                    other = by_name.get(record.name)
                    if other is not None and other[1] != impl.plugin_name:
                        raise UsageError(
                            f"two plugins provide the {KIND_LABELS[kind]} {record.name!r}: "
                            f"{self.describe_source(other[1])} and {self.describe_source(impl.plugin_name)}; "
                            "uninstall one of them or choose plugins with CERTLAB_PLUGINS"
                        )
                    by_name[record.name] = (record, impl.plugin_name)
            index[kind] = by_name
        return index

    @property
    def index(self) -> dict[str, dict[str, tuple[Any, str]]]:
        if self._index is None:
            self._index = self._build_index()
        return self._index

    # ------------------------------------------------------------------ queries

    def describe_source(self, plugin_name: str) -> str:
        dist, version = self._sources.get(plugin_name, ("(registered in process)", ""))
        return f"{dist} {version}".strip() + f" (plugin {plugin_name})"

    def names(self, kind: str) -> list[str]:
        return sorted(self.index[kind])

    def all(self, kind: str) -> dict[str, Any]:
        return {name: rec for name, (rec, _plugin) in sorted(self.index[kind].items())}

    def get(self, kind: str, name: str) -> Any:
        """The record ``name`` of ``kind``; an unknown name lists the valid ones and what to install."""
        entry = self.index[kind].get(name)
        if entry is not None:
            return entry[0]
        label = KIND_LABELS[kind]
        valid = ", ".join(self.names(kind)) or "none installed"
        hint = ""
        dist = KNOWN_PROVIDERS.get(kind, {}).get(name)
        if dist:
            hint = f"; it is provided by the distribution {dist}: pip install {dist}"
        broken = [f.entry_point for f in self.failures]
        if broken:
            hint += f"; plugins that failed to load: {', '.join(broken)}"
        raise UsageError(f"unknown {label} {name!r} (valid: {valid}){hint}")

    def plugin_of(self, kind: str, name: str) -> PluginInfo:
        self.get(kind, name)
        plugin_name = self.index[kind][name][1]
        return self.plugin_info(plugin_name)

    def plugin_info(self, plugin_name: str) -> PluginInfo:
        dist, version = self._sources.get(plugin_name, ("(registered in process)", "0"))
        provides = {
            kind: tuple(sorted(n for n, (_r, p) in self.index[kind].items() if p == plugin_name)) for kind in KINDS
        }
        return PluginInfo(
            name=plugin_name, distribution=dist, version=version, provides={k: v for k, v in provides.items() if v}
        )

    def plugins(self) -> list[PluginInfo]:
        names = [name for name, _plugin in self.pm.list_name_plugin() if name in self._sources]
        return [self.plugin_info(name) for name in sorted(names)]


def _only_from_env() -> set[str] | None:
    raw = os.environ.get(ONLY_ENV, "").strip()
    if not raw:
        return None
    return {part.strip() for part in raw.split(",") if part.strip()}


def discover(only: Iterable[str] | None = None, extra: Sequence[tuple[str, types.ModuleType]] = ()) -> Registry:
    """Load every plugin of the ``certlab.plugins`` group (or only those named, or in CERTLAB_PLUGINS).

    A plugin that fails to import is recorded in ``registry.failures`` and the others still load.
    """
    from stevedore import ExtensionManager, NamedExtensionManager

    wanted = set(only) if only is not None else _only_from_env()
    registry = Registry(new_plugin_manager())
    declared = _declared_plugins()
    _refuse_duplicate_names(declared, wanted)
    sources = {(name, value): (dist, version) for name, value, dist, version in declared}

    def on_failure(_manager: Any, entry_point: Any, error: BaseException) -> None:
        dist = sources.get((entry_point.name, entry_point.value), ("unknown distribution", ""))[0]
        registry.failures.append(
            PluginFailure(entry_point=entry_point.name, distribution=dist, error=f"{type(error).__name__}: {error}")
        )

    manager: ExtensionManager[Any]
    if wanted is None:
        manager = ExtensionManager(namespace=ENTRY_POINT_GROUP, on_load_failure_callback=on_failure)
    else:  # only the named entry points are imported at all
        manager = NamedExtensionManager(
            namespace=ENTRY_POINT_GROUP,
            names=sorted(wanted),
            on_load_failure_callback=on_failure,
            on_missing_entrypoints_callback=lambda _missing: None,  # reported below, in one line
        )
    seen: set[str] = set()
    for ext in sorted(manager.extensions, key=lambda e: e.name):
        dist, version = sources.get((ext.name, ext.entry_point.value), ("unknown distribution", "0"))
        seen.add(ext.name)
        try:
            registry.add_plugin(ext.plugin, ext.name, dist, version)
        except Exception as error:  # a module with malformed hooks
            registry.failures.append(
                PluginFailure(entry_point=ext.name, distribution=dist, error=f"{type(error).__name__}: {error}")
            )
    for name, module in extra:
        registry.add_plugin(module, name, "(registered in process)", "0")
    if wanted is not None:
        missing = sorted(wanted - seen - {name for name, _m in extra} - {f.entry_point for f in registry.failures})
        if missing:
            raise UsageError(
                f"{ONLY_ENV} names plugins that are not installed: {', '.join(missing)}; "
                "run 'certlab plugins' to see the installed ones"
            )
    return registry
