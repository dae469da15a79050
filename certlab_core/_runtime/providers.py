"""What to install for a name: the provider lists distributions publish.

The kernel names no plugin. A distribution may publish, in the entry point group
``certlab.providers``, a list of the names it knows and the distribution that provides each
(certlab-all publishes the built-in ones: ``certlab_all.providers:PROVIDERS``), as data: a
mapping of kind (``agents``, ``sandboxes``, ...) to a mapping of name to distribution. A
message about a name nothing installed provides says what to install from these lists. A list
that fails to load, or is not that shape, is left out and named in one line among the plugin
warnings (``certlab plugins``); without any list, a message says the kind and where to look.
"""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Iterable, Mapping, Sequence

from attrs import frozen

from certlab_core.plugin.types.discovery import PluginWarning
from certlab_core.sdk.deadline import PLUGIN_LOAD_ENV, PLUGIN_LOAD_S, TooSlow, deadline

ENTRY_POINT_GROUP = "certlab.providers"
#: What a message says when no installed list names the distribution that provides a name.
NO_LIST = "no installed provider list names its distribution (certlab-all lists every built-in one)"
MAX_NAMES = 5000  # names in one list: past it, the list is not read
#: A distribution's name as PEP 508 spells it, so that a hint never prints anything but a name.
DISTRIBUTION = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?$")
#: A record's name in a list: printable, no space, bounded.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:+-]{0,99}$")


@frozen
class DeclaredList:
    """One entry point of the group, not loaded yet: its name, its distribution and version."""

    name: str
    distribution: str
    version: str
    entry_point: importlib.metadata.EntryPoint


def declared_lists(
    entry_points: Iterable[tuple[importlib.metadata.EntryPoint, importlib.metadata.Distribution]],
) -> list[DeclaredList]:
    """The provider lists among ``entry_points`` (each with its distribution), once each, none loaded."""
    found: dict[tuple[str, str], DeclaredList] = {}
    for ep, dist in entry_points:
        if ep.group == ENTRY_POINT_GROUP:
            name = dist.metadata["Name"] or "?"
            found.setdefault((ep.name, name), DeclaredList(ep.name, name, dist.version or "?", ep))
    return sorted(found.values(), key=lambda d: (d.distribution, d.name))


def installed_lists() -> list[DeclaredList]:
    """Every entry point of ``certlab.providers`` of the installed distributions, in one scan, none loaded."""
    return declared_lists((ep, dist) for dist in importlib.metadata.distributions() for ep in dist.entry_points)


def checked_list(value: object, kinds: Iterable[str]) -> dict[str, dict[str, str]]:
    """``value`` as a provider list (kind -> name -> distribution); ValueError saying the first thing wrong."""
    known = set(kinds)
    if not isinstance(value, Mapping):
        raise ValueError(f"it is a {type(value).__name__}, not a mapping of kind to names")
    checked: dict[str, dict[str, str]] = {}
    count = 0
    for kind, names in value.items():
        if not isinstance(kind, str) or kind not in known:
            raise ValueError(f"{str(kind)[:60]!r} is no kind of certlab plugin (kinds: {', '.join(sorted(known))})")
        if not isinstance(names, Mapping):
            raise ValueError(f"{kind}: a {type(names).__name__}, not a mapping of name to distribution")
        count += len(names)
        if count > MAX_NAMES:
            raise ValueError(f"it names over {MAX_NAMES} records")
        for name, distribution in names.items():
            if not isinstance(name, str) or not NAME.match(name):
                raise ValueError(f"{kind}: {str(name)[:60]!r} is not a record's name")
            if not isinstance(distribution, str) or not DISTRIBUTION.match(distribution):
                raise ValueError(f"{kind}: {name}: {str(distribution)[:60]!r} is not a distribution's name")
            checked.setdefault(kind, {})[name] = distribution
    return checked


class Providers:
    """The installed provider lists, loaded when first asked: which distributions provide a name of a kind."""

    def __init__(
        self, kinds: Iterable[str], declared: Sequence[DeclaredList] | None = None, load_s: float = PLUGIN_LOAD_S
    ) -> None:
        self._kinds = tuple(kinds)
        self._load_s = load_s  # how long a list's import may take before it is left out
        self._declared = declared  # None: scanned when first asked
        self._by_kind: dict[str, dict[str, list[str]]] | None = None
        self._warnings: list[PluginWarning] = []

    def _load(self) -> dict[str, dict[str, list[str]]]:
        if self._by_kind is not None:
            return self._by_kind
        by_kind: dict[str, dict[str, list[str]]] = {}
        for declared in installed_lists() if self._declared is None else self._declared:
            try:
                with deadline(self._load_s):
                    loaded = declared.entry_point.load()
                listed = checked_list(loaded, self._kinds)
            except (Exception, SystemExit, TooSlow) as error:  # a broken, hostile or hung list: named, left out
                if isinstance(error, TooSlow):
                    why = f"its import did not finish within {self._load_s:g} s ({PLUGIN_LOAD_ENV} sets the wait)"
                else:
                    why = f"{type(error).__name__}: " + (str(error).splitlines()[0][:200] if str(error) else "")
                self._warnings.append(
                    PluginWarning(
                        declared.name,
                        f"{declared.distribution} {declared.version}",
                        f"its provider list ({ENTRY_POINT_GROUP}) is left out: {why}",
                    )
                )
                continue
            for kind, names in listed.items():
                for name, distribution in names.items():
                    known = by_kind.setdefault(kind, {}).setdefault(name, [])
                    if distribution not in known:
                        known.append(distribution)
        self._by_kind = by_kind
        return by_kind

    def warnings(self) -> list[PluginWarning]:
        """The lists left out, one warning each (the lists are loaded first)."""
        self._load()
        return list(self._warnings)

    def of(self, kind: str, name: str) -> list[str]:
        """The distributions the lists say provide ``name`` of ``kind``, sorted (none when no list names it)."""
        return sorted(self._load().get(kind, {}).get(name, []))

    def named(self, kind: str) -> dict[str, list[str]]:
        """Every name the lists give for ``kind``, with its distributions."""
        return {name: sorted(dists) for name, dists in sorted(self._load().get(kind, {}).items())}

    def distributions(self, kind: str, leave_out: Iterable[str] = ()) -> list[str]:
        """Every distribution the lists say provides some ``kind`` (but the names ``leave_out``), sorted."""
        skipped = set(leave_out)
        return sorted({d for name, dists in self._load().get(kind, {}).items() if name not in skipped for d in dists})

    def install_line(self, kind: str, leave_out: Iterable[str] = ()) -> str:
        """``pip install A`` (or ``A or B``) for a ``kind`` nothing installed provides; else where to look."""
        found = self.distributions(kind, leave_out)
        if not found:
            return f"{NO_LIST}; run 'certlab plugins' to see what is installed"
        return "pip install " + " or ".join(found)
