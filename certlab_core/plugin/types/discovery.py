"""What discovery says of each plugin: installed, broken, or a warning."""

from __future__ import annotations

from collections.abc import Mapping

from attrs import field, frozen

from certlab_core.plugin.types.base import Record
from certlab_core.plugin.types.fields import names_map

# --------------------------------------------------------------------------- registry


@frozen
class PluginInfo(Record):
    """One loaded plugin: its entry point name, distribution and what it provides."""

    name: str
    distribution: str
    version: str
    provides: Mapping[str, tuple[str, ...]] = field(converter=names_map)


@frozen
class PluginFailure(Record):
    """A plugin left out, reported in one line: it failed to import, or one of its hooks
    (``hook``) raised or returned something other than the spec's records."""

    entry_point: str
    distribution: str
    error: str
    hook: str = ""

    def line(self) -> str:
        where = f", hook {self.hook}" if self.hook else ""
        return f"broken plugin {self.entry_point} ({self.distribution}{where}): {self.error}"


@frozen
class PluginWarning(Record):
    """Something a plugin author should fix that does not stop the plugin: a hook no spec
    defines (a misspelling), a hook function without ``@hookimpl``, a name two plugins provide."""

    plugin: str
    distribution: str
    message: str

    def line(self) -> str:
        return f"warning: plugin {self.plugin} ({self.distribution}): {self.message}"
