"""The private runtime: one-scan discovery, validation, registry, containment.

Only the kernel's own engines (``gate``, ``certify``, ``report``, ``cli``, ``evidence``) import
it; a plugin never does (tests/test_author_api.py): a plugin's own command asks
``certlab_core.sdk.services`` for the installed plugins, and a hook is handed a narrow protocol,
never the registry.

May import: plugin, sdk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from certlab_core.plugin.types.rule import StatisticalRule
from certlab_core.plugin.types.sandbox import Containment, ResourceLimits
from certlab_core.sdk import services


class _Services:
    """The runtime's implementation of the SDK's services (``certlab_core.sdk.services``)."""

    def installed(self) -> services.InstalledPlugins:
        from certlab_core._runtime.registry import discover

        return discover()

    def containment(
        self,
        choice: str,
        hidden: Iterable[str],
        warn: Callable[[str], None],
        limits: ResourceLimits | None = None,
    ) -> Containment:
        from certlab_core._runtime.containment import choose_containment
        from certlab_core._runtime.registry import discover

        return choose_containment(discover(), choice, hidden, warn, limits)

    def check_sandbox(self, choice: str) -> None:
        from certlab_core._runtime.containment import check_choice
        from certlab_core._runtime.registry import discover

        registry = discover()
        check_choice(choice, registry.all("sandboxes"), registry.excluded, registry.providers)

    def default_rule(self, needed_by: str) -> StatisticalRule:
        from certlab_core._runtime.default_rule import default_rule
        from certlab_core._runtime.registry import discover

        return default_rule(discover(), needed_by)


services.provide(_Services())
