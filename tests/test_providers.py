"""What to install for a name comes from the provider lists distributions publish, certlab-all's among them."""

from __future__ import annotations

import importlib.metadata
import os
import sys
from pathlib import Path

import pytest

from certlab_core._runtime.containment import check_choice
from certlab_core._runtime.providers import ENTRY_POINT_GROUP, NO_LIST, DeclaredList, Providers, checked_list
from certlab_core._runtime.registry import KINDS, Registry, discover, new_plugin_manager
from certlab_core.plugin import AgentAdapter
from certlab_core.plugin.errors import UsageError
from certlab_core.testing import run_certlab


def listed(tmp_path: Path, source: str, name: str = "acme") -> DeclaredList:
    """A provider list published by a module written to ``tmp_path`` (on ``sys.path``), as its entry point."""
    (tmp_path / f"{name}_providers.py").write_text(source)
    entry = importlib.metadata.EntryPoint(name, f"{name}_providers:PROVIDERS", ENTRY_POINT_GROUP)
    return DeclaredList(name, f"{name}-dist", "1.0", entry)


def test_certlab_all_publishes_the_list_of_every_installed_distributions_records() -> None:
    # Each record an installed distribution provides is listed with that distribution; a listed one whose
    # distribution is not installed here (another branch's, say) is only checked for its shape.
    registry = discover()
    lists = [ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == "certlab-all"]
    assert len(lists) == 1
    providers = checked_list(lists[0].load(), KINDS)
    installed = {info.distribution for info in registry.plugins()}
    for kind in KINDS:
        for name in registry.names(kind):
            (plugin,) = registry.providers_of(kind, name)
            assert providers.get(kind, {}).get(name) == registry.plugin_info(plugin).distribution, (kind, name)
        for name, distribution in providers.get(kind, {}).items():
            if distribution in installed:
                assert name in registry.names(kind), f"{distribution} provides no {kind} {name!r}"


def test_an_unknown_name_says_the_distribution_a_list_names() -> None:
    registry = Registry(new_plugin_manager())
    with pytest.raises(UsageError) as refused:
        registry.get(AgentAdapter, "aider")
    assert refused.value.message == (
        "unknown agent 'aider' (valid: none installed); "
        "it is provided by the distribution certlab-aider: pip install certlab-aider"
    )


def test_without_any_list_an_unknown_name_says_the_kind_and_where_to_look() -> None:
    registry = Registry(new_plugin_manager())
    registry.providers = Providers(KINDS, [])
    with pytest.raises(UsageError) as refused:
        registry.get(AgentAdapter, "aider")
    assert refused.value.message == (
        f"unknown agent 'aider' (valid: none installed); {NO_LIST}: run 'certlab plugins' to see what is installed"
    )
    with pytest.raises(UsageError) as sandbox:
        check_choice("bwrap", {}, {}, Providers(KINDS, []))
    assert sandbox.value.message == (
        f"--sandbox 'bwrap' is not one of auto or a sandbox (none installed: {NO_LIST}; run 'certlab plugins' to "
        "see what is installed)"
    )


def test_a_third_partys_list_names_its_own_distribution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = Registry(new_plugin_manager())
    registry.providers = Providers(KINDS, [listed(tmp_path, "PROVIDERS = {'agents': {'robo': 'acme-robo'}}\n")])
    with pytest.raises(UsageError, match=r"it is provided by the distribution acme-robo: pip install acme-robo$"):
        registry.get(AgentAdapter, "robo")
    assert registry.warnings() == []


@pytest.mark.parametrize(
    ("source", "why"),
    [
        ("raise RuntimeError('broken')\n", "RuntimeError: broken"),
        ("import sys\nsys.exit(3)\n", "SystemExit: 3"),
        ("PROVIDERS = ['agents']\n", "it is a list, not a mapping of kind to names"),
        ("PROVIDERS = {'agent': {'robo': 'acme-robo'}}\n", "'agent' is no kind of certlab plugin"),
        ("PROVIDERS = {'agents': ['robo']}\n", "agents: a list, not a mapping of name to distribution"),
        ("PROVIDERS = {'agents': {'robo': 'x; rm -rf ~'}}\n", "agents: robo: 'x; rm -rf ~' is not a distribution"),
        ("PROVIDERS = {'agents': {'robo bot': 'acme'}}\n", "agents: 'robo bot' is not a record's name"),
        ("PROVIDERS = {'agents': {f'a{i}': 'acme' for i in range(6000)}}\n", "it names over 5000 records"),
    ],
)
def test_a_broken_or_hostile_list_is_left_out_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, why: str
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "bad_providers", raising=False)  # each case's module is imported afresh
    good = listed(tmp_path, "PROVIDERS = {'agents': {'aider': 'certlab-aider'}}\n", "good")
    bad = listed(tmp_path, source, "bad")
    providers = Providers(KINDS, [bad, good])
    assert providers.of("agents", "aider") == ["certlab-aider"]  # the other lists still count
    assert providers.of("agents", "robo") == []
    (warning,) = providers.warnings()
    assert (warning.plugin, warning.distribution) == ("bad", "bad-dist 1.0")
    assert warning.message.startswith(f"its provider list ({ENTRY_POINT_GROUP}) is left out: ")
    assert why in warning.message and "\n" not in warning.line()


def test_certlab_plugins_names_a_broken_list_and_certify_is_not_refused_for_it(tmp_path: Path) -> None:
    (tmp_path / "hostile_providers.py").write_text("PROVIDERS = {'agents': {'robo': 'x; rm -rf ~'}}\n")
    dist = tmp_path / "hostile-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: hostile\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nhostile = hostile_providers:PROVIDERS\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), *(p for p in sys.path if p)]))
    done = run_certlab("plugins", env=env)
    assert done.returncode == 0 and "Traceback" not in done.stderr
    (line,) = [line for line in done.stderr.splitlines() if "hostile" in line]
    assert line == (
        f"warning: plugin hostile (hostile 0.1): its provider list ({ENTRY_POINT_GROUP}) is left out: "
        "ValueError: agents: robo: 'x; rm -rf ~' is not a distribution's name"
    )
    refused = run_certlab("certify", "--family", "intervals", "--agent", "robo", "--out", str(tmp_path / "c"), env=env)
    assert refused.returncode == 4 and "Traceback" not in refused.stderr
    assert "unknown agent 'robo'" in refused.stderr and "rm -rf" not in refused.stderr


def test_without_any_list_a_recorded_proof_that_is_not_installed_is_refused_not_skipped() -> None:
    from certlab_core.certify.instrument_proofs import missing_proofs, proof_names, recheck_bundle

    registry = discover(only=("intervals", "policy", "suite"))
    registry.providers = Providers(KINDS, [])
    assert proof_names(registry) == [] and missing_proofs(registry) == {}
    family = registry.get("task_families", "intervals")
    bundle = {"instrument": [{"family": "intervals", "holds": True, "mutation": {"score": 1.0}}]}
    with pytest.raises(UsageError) as refused:
        recheck_bundle(registry, bundle, {"intervals": family}, [], {"intervals": ()}, 1, lambda _line: None)
    assert refused.value.message == (
        f"mutants intervals: the bundle records a mutation proof, and no plugin installed provides it ({NO_LIST}; "
        "run 'certlab plugins' to see what is installed)"
    )


def test_a_user_task_without_held_out_acceptance_says_what_is_missing_with_or_without_a_list(tmp_path: Path) -> None:
    from certlab_core.certify.acceptance import _not_installed

    registry = Registry(new_plugin_manager())  # no held-out acceptance installed
    registry.providers = Providers(KINDS, [])
    assert _not_installed(registry, "--task t").message == (
        "--task t: a task of your own is proven and scored by its held-out cases, and no plugin of held-out "
        f"acceptance is installed ({NO_LIST}; run 'certlab plugins' to see what is installed)"
    )
    # A module name of its own: another test's acme_providers may be imported already in this process.
    list_of_held_out = listed(tmp_path, "PROVIDERS = {'held_out': {'acceptance': 'acme-ho'}}\n", name="heldout")
    registry.providers = Providers(KINDS, [list_of_held_out])
    sys.path.insert(0, str(tmp_path))
    try:
        said = _not_installed(registry, "--task t").message
    finally:
        sys.path.remove(str(tmp_path))
    assert said.endswith("and acme-ho is not installed (pip install acme-ho)"), said
