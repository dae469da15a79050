"""Plugin discovery (one scan of ``certlab.plugins``) and the records by kind.

Discovery survives bad plugins: a plugin that fails to import, that implements a hook no spec
defines (as tox's ``check_pending``), whose hook raises, or whose hook returns anything but
the spec's records is named in one line (``PluginFailure``) and left out, and the others keep
working; ``refuse_broken`` makes certify and run refuse while one that a run could use is.
A hook function without ``@hookimpl`` and a name two plugins provide are warnings
(``PluginWarning``); a duplicate name is refused only when something asks for it.
"""

from __future__ import annotations

import difflib
import importlib.metadata
import inspect
import os
import re
import types
import typing
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar, overload

import pluggy

from certlab_core._runtime.providers import ENTRY_POINT_GROUP as PROVIDERS_GROUP
from certlab_core._runtime.providers import NO_LIST, DeclaredList, Providers, declared_lists
from certlab_core.plugin import hookspecs
from certlab_core.plugin.errors import UsageError
from certlab_core.plugin.types.discovery import PluginFailure, PluginInfo, PluginWarning
from certlab_core.sdk.deadline import PLUGIN_LOAD_ENV, PLUGIN_LOAD_S, TooSlow, deadline, plugin_wait_s

ENTRY_POINT_GROUP = "certlab.plugins"
ONLY_ENV = "CERTLAB_PLUGINS"
HOOK_PREFIX = "certlab_"
IN_PROCESS = "(registered in process)"

R = TypeVar("R")


def _record_types() -> dict[str, type]:
    """Every spec ``certlab_<kind>`` that returns a list of records, as kind -> the record type."""
    found: dict[str, type] = {}
    for name, fn in inspect.getmembers(hookspecs, inspect.isfunction):
        if not name.startswith(HOOK_PREFIX) or not hasattr(fn, f"{hookspecs.PROJECT}_spec"):
            continue
        returned = typing.get_type_hints(fn).get("return")
        if typing.get_origin(returned) is list:
            (item,) = typing.get_args(returned)
            if isinstance(item, type):
                found[name[len(HOOK_PREFIX) :]] = item
    return found


#: The record kinds: kind (the hook's name without ``certlab_``) -> the record type its hook returns.
KIND_RECORDS: dict[str, type] = _record_types()
KINDS: tuple[str, ...] = tuple(sorted(KIND_RECORDS))
SPEC_NAMES: frozenset[str] = frozenset(
    name for name, fn in inspect.getmembers(hookspecs, inspect.isfunction) if hasattr(fn, f"{hookspecs.PROJECT}_spec")
)


def _singular(kind: str) -> str:
    words = kind.replace("_", " ")
    if words.endswith("ies"):
        return words[:-3] + "y"
    return words[:-2] if words.endswith("xes") else words.removesuffix("s")


KIND_LABELS = {kind: _singular(kind) for kind in KINDS}


def kind_of(record_type: type) -> str:
    """The kind whose hook returns ``record_type`` records (``AgentAdapter`` -> ``agents``)."""
    for kind, known in KIND_RECORDS.items():
        if known is record_type:
            return kind
    raise TypeError(f"{record_type.__name__} is not a record any certlab hook returns")


def new_plugin_manager() -> pluggy.PluginManager:
    """A plugin manager that knows certlab's hook specs and no plugin yet."""
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    return pm


def _declared_plugins() -> tuple[list[tuple[str, str, str, str, importlib.metadata.EntryPoint]], list[DeclaredList]]:
    """Every entry point of the group, as (name, value, distribution, version, entry point), and every provider
    list (``certlab.providers``, not loaded), in one scan.

    One distribution seen twice (its source folder on ``sys.path`` beside its installed
    metadata, as when a tool runs from inside that folder) declares its entry points once.
    """
    found: dict[tuple[str, str, str, str], importlib.metadata.EntryPoint] = {}
    lists: list[tuple[importlib.metadata.EntryPoint, importlib.metadata.Distribution]] = []
    for dist in importlib.metadata.distributions():
        for ep in dist.entry_points:
            if ep.group == ENTRY_POINT_GROUP:
                found.setdefault((ep.name, ep.value, dist.metadata["Name"] or "?", dist.version or "?"), ep)
            elif ep.group == PROVIDERS_GROUP:
                lists.append((ep, dist))
    return [(*key, ep) for key, ep in found.items()], declared_lists(lists)


Provider = tuple[object, str]  # (record, plugin name)


class Registry:
    """The loaded plugins and, per kind, the records they provide indexed by name."""

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self.pm = pm
        self.failures: list[PluginFailure] = []
        self._warnings: list[PluginWarning] = []
        self._sources: dict[str, tuple[str, str]] = {}  # plugin name -> (distribution, version)
        self._modules: dict[str, object] = {}
        self._index: dict[str, dict[str, list[Provider]]] | None = None
        #: entry points installed but not loaded because CERTLAB_PLUGINS leaves them out: name -> distribution
        self.excluded: dict[str, str] = {}
        #: which distribution provides a name nothing installed provides (the installed provider lists)
        self.providers = Providers(KINDS)
        #: the seconds a plugin's import and each of its record hooks may take (``discover`` reads the variable)
        self.load_s = PLUGIN_LOAD_S

    # ------------------------------------------------------------------ loading

    def add_plugin(self, module: object, name: str, distribution: str, version: str) -> None:
        """Register one plugin module (what discovery does for each entry point)."""
        self.pm.register(module, name=name)
        self._sources[name] = (distribution, version)
        self._modules[name] = module
        self._index = None

    def check_pending(self, plugin_name: str) -> bool:
        """Leave out ``plugin_name`` when it implements a hook no spec defines, as a failure; True when it stays.

        As tox's ``check_pending``: a misspelt hook would never be called, so what the plugin
        meant to provide would be missing without a word. A hook marked ``optionalhook`` may
        have no spec.
        """
        plugin = self.pm.get_plugin(plugin_name)
        unknown = [
            caller_name
            for caller_name in sorted(dir(self.pm.hook))
            if isinstance(caller := getattr(self.pm.hook, caller_name), pluggy.HookCaller)
            and not caller.has_spec()
            and any(impl.plugin is plugin and not impl.optionalhook for impl in caller.get_hookimpls())
        ]
        if not unknown:
            return True
        self.pm.unregister(name=plugin_name)
        self._index = None
        for hook in unknown:
            self._fail(plugin_name, hook, f"implements {hook}, which no certlab hook spec defines{_close_spec(hook)}")
        return False

    def _fail(self, plugin_name: str, hook: str, error: str) -> None:
        dist = self._sources.get(plugin_name, (IN_PROCESS, ""))[0]
        self.failures.append(PluginFailure(entry_point=plugin_name, distribution=dist, error=error, hook=hook))

    def _records_of(self, kind: str, impl: pluggy.HookImpl) -> list[object] | None:
        """One plugin's records for one kind, or None (and a failure) when its hook misbehaves."""
        hook = HOOK_PREFIX + kind
        try:
            with deadline(self.load_s):
                returned = impl.function()
        except TooSlow:
            said = f"did not return within {self.load_s:g} s ({PLUGIN_LOAD_ENV} sets the wait)"
            self._fail(impl.plugin_name, hook, said)
            return None
        except Exception as error:  # a plugin's bug must not take another plugin or command down
            self._fail(impl.plugin_name, hook, f"raised {type(error).__name__}: {error}")
            return None
        if returned is None:
            return []
        if not isinstance(returned, list | tuple):
            self._fail(impl.plugin_name, hook, f"returned {type(returned).__name__}, not a list")
            return None
        expected = KIND_RECORDS[kind]
        for record in returned:
            if not isinstance(record, expected):
                self._fail(
                    impl.plugin_name, hook, f"returned a {type(record).__name__} where a {expected.__name__} belongs"
                )
                return None
        return list(returned)

    def _build_index(self) -> dict[str, dict[str, list[Provider]]]:
        index: dict[str, dict[str, list[Provider]]] = {}
        for kind in KINDS:
            by_name: dict[str, list[Provider]] = {}
            caller = getattr(self.pm.hook, HOOK_PREFIX + kind)
            for impl in reversed(caller.get_hookimpls()):
                for record in self._records_of(kind, impl) or ():
                    providers = by_name.setdefault(str(getattr(record, "name", "")), [])
                    if not any(plugin == impl.plugin_name for _r, plugin in providers):
                        providers.append((record, impl.plugin_name))
            index[kind] = by_name
        return index

    @property
    def index(self) -> dict[str, dict[str, list[Provider]]]:
        if self._index is None:
            self._index = self._build_index()
        return self._index

    # ------------------------------------------------------------------ queries

    def describe_source(self, plugin_name: str) -> str:
        dist, version = self._sources.get(plugin_name, (IN_PROCESS, ""))
        return f"{dist} {version}".strip() + f" (plugin {plugin_name})"

    def installed_source(self, plugin_name: str) -> str:
        """``describe_source`` of an installed plugin; empty for one registered in process (it has no distribution)."""
        return (
            ""
            if self._sources.get(plugin_name, (IN_PROCESS, ""))[0] == IN_PROCESS
            else self.describe_source(plugin_name)
        )

    @staticmethod
    def _kind(kind: str | type) -> str:
        return kind if isinstance(kind, str) else kind_of(kind)

    def names(self, kind: str | type) -> list[str]:
        return sorted(self.index[self._kind(kind)])

    @overload
    def all(self, kind: type[R]) -> dict[str, R]: ...
    @overload
    def all(self, kind: str) -> dict[str, Any]: ...
    def all(self, kind: str | type) -> dict[str, Any]:
        """Every record of ``kind`` by name; a name two plugins provide is refused, since all are used."""
        return {name: self.get(kind, name) for name in self.names(kind)}

    @overload
    def get(self, kind: type[R], name: str) -> R: ...
    @overload
    def get(self, kind: str, name: str) -> Any: ...
    def get(self, kind: str | type, name: str) -> Any:
        """The record ``name`` of ``kind`` (a kind name or its record type, ``registry.get(AgentAdapter, "oracle")``).

        An unknown name lists the valid ones and what to install; a name two plugins
        provide is refused naming both.
        """
        kind_name = self._kind(kind)
        providers = self.index[kind_name].get(name)
        label = KIND_LABELS[kind_name]
        if providers and len(providers) == 1:
            return providers[0][0]
        if providers:
            both = " and ".join(self.describe_source(plugin) for _r, plugin in providers)
            raise UsageError(
                f"two plugins provide the {label} {name!r}: {both}; "
                "uninstall one of them or choose plugins with CERTLAB_PLUGINS"
            )
        valid = ", ".join(self.names(kind_name)) or "none installed"
        dists = self.providers.of(kind_name, name)
        left_out = sorted((ep, ep_dist) for ep, ep_dist in self.excluded.items() if ep_dist in dists)
        if left_out:
            hint = (
                f"; it is provided by the plugin {left_out[0][0]} ({left_out[0][1]}), which {ONLY_ENV} leaves out: "
                f"add {left_out[0][0]} to {ONLY_ENV}"
            )
        elif dists:
            hint = f"; it is provided by the distribution {' or '.join(dists)}: pip install {' or '.join(dists)}"
        else:
            hint = f"; {NO_LIST}: run 'certlab plugins' to see what is installed"
        broken = {f"{f.entry_point} ({f.distribution}): {f.error}": None for f in self.failures}
        if broken:
            hint += f"; plugins that failed to load: {'; '.join(broken)}"
        raise UsageError(f"unknown {label} {name!r} (valid: {valid}){hint}")

    def plugin_of(self, kind: str | type, name: str) -> PluginInfo:
        kind_name = self._kind(kind)
        self.get(kind_name, name)
        return self.plugin_info(self.index[kind_name][name][0][1])

    def part_of(self, kind: str, name: str, part: str) -> str:
        """How a line names a record's callable: "the agent claude-code's version (certlab-claude-code)"."""
        return f"the {KIND_LABELS.get(kind, kind)} {name}'s {part} ({self.plugin_of(kind, name).distribution})"

    def plugin_name_of(self, kind: str | type, name: str) -> str:
        """The name of the plugin that provides ``name`` of ``kind`` (refused like ``get`` when unknown)."""
        kind_name = self._kind(kind)
        self.get(kind_name, name)
        return self.index[kind_name][name][0][1]

    def module_of(self, kind: str | type, name: str) -> object | None:
        """The plugin module that provides ``name`` of ``kind`` (None when it is registered without one)."""
        return self.pm.get_plugin(self.plugin_name_of(kind, name))

    def providers_of(self, kind: str | type, name: str) -> list[str]:
        """The plugins that provide ``name`` of ``kind`` (none, one, or several when two claim it)."""
        return [plugin for _record, plugin in self.index[self._kind(kind)].get(name, [])]

    def plugin_info(self, plugin_name: str) -> PluginInfo:
        dist, version = self._sources.get(plugin_name, (IN_PROCESS, "0"))
        provides = {
            kind: tuple(
                sorted(n for n, providers in self.index[kind].items() if any(p == plugin_name for _r, p in providers))
            )
            for kind in KINDS
        }
        return PluginInfo(
            name=plugin_name, distribution=dist, version=version, provides={k: v for k, v in provides.items() if v}
        )

    def plugins(self) -> list[PluginInfo]:
        names = [name for name, _plugin in self.pm.list_name_plugin() if name in self._sources]
        return [self.plugin_info(name) for name in sorted(names)]

    # ------------------------------------------------------------------ warnings

    def warnings(self) -> list[PluginWarning]:
        """What plugin authors should fix: misspelt hooks, unmarked hook functions, names two plugins provide."""
        found = list(self._warnings) + self.providers.warnings()
        for name, module in sorted(self._modules.items()):
            dist = self._sources.get(name, (IN_PROCESS, ""))[0]
            found.extend(PluginWarning(name, dist, message) for message in _hook_mistakes(self.pm, name, module))
        for kind in KINDS:
            for record_name, providers in sorted(self.index[kind].items()):
                if len(providers) > 1:
                    first, *others = (plugin for _r, plugin in providers)
                    both = " and ".join(self.describe_source(p) for p in [first, *others])
                    found.append(
                        PluginWarning(
                            first,
                            self._sources.get(first, (IN_PROCESS, ""))[0],
                            f"the {KIND_LABELS[kind]} {record_name!r} is provided by {both}; "
                            "a command that uses it is refused",
                        )
                    )
        return found


def _close_spec(name: str) -> str:
    match = difflib.get_close_matches(name, sorted(SPEC_NAMES), n=1, cutoff=0.75)
    return f" (did you mean {match[0]}?)" if match else ""


def _hook_mistakes(pm: pluggy.PluginManager, plugin_name: str, module: object) -> list[str]:
    """A plugin's hook implementations that no spec defines, and its hook-like functions without ``@hookimpl``."""
    mistakes: list[str] = []
    plugin = pm.get_plugin(plugin_name)
    marked: set[str] = set()
    for caller_name in dir(pm.hook):
        caller = getattr(pm.hook, caller_name)
        if not isinstance(caller, pluggy.HookCaller):
            continue
        for impl in caller.get_hookimpls():
            if impl.plugin is not plugin:
                continue
            marked.add(caller_name)
            if not caller.has_spec():
                hint = _close_spec(caller_name)
                mistakes.append(f"implements {caller_name}, which no certlab hook spec defines{hint}")
    module_name = getattr(module, "__name__", None)
    for attr, value in sorted(vars(module).items()) if isinstance(module, types.ModuleType) else ():
        if not attr.startswith(HOOK_PREFIX) or attr in marked or not inspect.isfunction(value):
            continue
        if value.__module__ != module_name or hasattr(value, f"{hookspecs.PROJECT}_impl"):
            continue  # another module's, or a hook implementation (a spec-less one makes its plugin broken)
        if attr in SPEC_NAMES:
            mistakes.append(f"defines {attr} without @hookimpl, so certlab never calls it")
        elif _close_spec(attr):
            mistakes.append(f"defines {attr}, which is not a certlab hook{_close_spec(attr)}")
    return mistakes


def _only_from_env() -> set[str] | None:
    raw = os.environ.get(ONLY_ENV, "").strip()
    if not raw:
        return None
    return {part.strip() for part in raw.split(",") if part.strip()}


def normal_plugin_name(name: str) -> str:
    """A plugin's name as compared: lower case, each run of ``-``, ``_`` and ``.`` one ``-`` (as pip compares)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def discover(only: Iterable[str] | None = None, extra: Sequence[tuple[str, types.ModuleType]] = ()) -> Registry:
    """Load every plugin of the ``certlab.plugins`` group (or only those named, or in CERTLAB_PLUGINS).

    A plugin that fails to import, or whose entry point name another distribution also
    declares, is recorded in ``registry.failures`` and the others still load.
    """
    asked = set(only) if only is not None else _only_from_env()
    registry = Registry(new_plugin_manager())
    registry.load_s = plugin_wait_s()
    # The one scan of the installed metadata; only wanted entry points are imported, provider lists when asked.
    declared, provider_lists = _declared_plugins()
    registry.providers = Providers(KINDS, provider_lists, registry.load_s)
    # A name asked for matches the entry point it spells however its separators and case are written.
    spelt = {normal_plugin_name(name): name for name, *_rest in declared}
    wanted = None if asked is None else {spelt.get(normal_plugin_name(name), name) for name in asked}
    declaring: dict[str, list[str]] = {}
    for name, _value, dist, version, _ep in declared:
        declaring.setdefault(name, []).append(f"{dist} {version}")
        if wanted is not None and name not in wanted:
            registry.excluded[name] = dist
    ambiguous = {name for name, dists in declaring.items() if len(dists) > 1 and (wanted is None or name in wanted)}
    for name in sorted(ambiguous):
        registry.failures.append(
            PluginFailure(
                entry_point=name,
                distribution=" and ".join(sorted(declaring[name])),
                error=f"two distributions declare the certlab plugin {name!r}; uninstall one of them",
            )
        )
    seen: set[str] = set()
    for name, _value, dist, version, entry_point in sorted(declared, key=lambda d: d[0]):
        seen.add(name)
        if (wanted is not None and name not in wanted) or name in ambiguous:
            continue
        try:
            with deadline(registry.load_s):
                module = entry_point.load()
        except TooSlow:  # an import that never ends (a loop, a network wait) must not hang every command
            registry.failures.append(
                PluginFailure(
                    entry_point=name,
                    distribution=dist,
                    error=f"its import did not finish within {registry.load_s:g} s ({PLUGIN_LOAD_ENV} sets the wait)",
                )
            )
            continue
        except (Exception, SystemExit) as error:  # a plugin that cannot be imported; the others still load
            registry.failures.append(
                PluginFailure(entry_point=name, distribution=dist, error=f"{type(error).__name__}: {error}")
            )
            continue
        try:
            registry.add_plugin(module, name, dist, version)
        except Exception as error:  # a module with malformed hooks (a hook whose arguments the spec does not have)
            registry.failures.append(
                PluginFailure(entry_point=name, distribution=dist, error=f"{type(error).__name__}: {error}")
            )
            continue
        registry.check_pending(name)
    for name, module in extra:
        registry.add_plugin(module, name, IN_PROCESS, "0")
        registry.check_pending(name)
    if wanted is not None:
        missing = sorted(
            wanted - seen - ambiguous - {name for name, _m in extra} - {f.entry_point for f in registry.failures}
        )
        if missing:
            raise UsageError(
                f"{ONLY_ENV} names plugins that are not installed: {', '.join(missing)}; "
                "run 'certlab plugins' to see the installed ones"
            )
    return registry


#: The kinds a run uses all of, or one of by name, so that one left out would change its verdict without a word.
VERDICT_KINDS: tuple[str, ...] = ("graders", "statistical_rules", "sandboxes", "executors", "reporters")


def refuse_broken(registry: Registry, command: str) -> None:
    """Refuse ``command`` (certify, run) before anything runs while a plugin it could use is broken.

    A plugin whose graders, rules, sandboxes, executors or reporters hook misbehaved would make
    the run use less than is installed; one that failed to import, or to register, could be
    any of these. Either is named with its distribution and error, and how to leave it out.
    """
    registry.index  # noqa: B018  (building it calls every hook: a hook that raises is a failure then)
    verdict_hooks = {HOOK_PREFIX + kind for kind in VERDICT_KINDS}
    broken = [f for f in registry.failures if not f.hook or f.hook in verdict_hooks or f.hook not in SPEC_NAMES]
    if not broken:
        return
    named = "; ".join(
        f"the plugin {f.entry_point} ({f.distribution}{', hook ' + f.hook if f.hook else ''}) is broken: {f.error}"
        for f in broken
    )
    distributions = sorted(
        {d.split(" ")[0] for f in broken for d in f.distribution.split(" and ") if not d.startswith(("(", "unknown "))}
    )
    uninstall = f" (pip uninstall {' '.join(distributions)})" if distributions else ""
    entry_points = ", ".join(sorted({f.entry_point for f in broken}))
    *labels, last = (KIND_LABELS[k] for k in VERDICT_KINDS)
    kinds = f"{', '.join(labels)} or {last}"
    raise UsageError(
        f"{command} refuses: {named}; any {kinds} it provides would be left out, and the run would use less than is "
        f"installed. Uninstall it{uninstall}, or leave it out: set {ONLY_ENV} to the plugins to load, without "
        f"{entry_points} (see 'certlab plugins')"
    )
