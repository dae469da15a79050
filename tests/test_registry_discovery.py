"""Plugin discovery through real entry points: choosing plugins, a broken plugin, duplicate names, unknown names.

Throwaway distributions are written here, built into wheels and installed with pip, each
scenario's into its own folder, which only that scenario's commands in the fresh
environment (see ``freshenv``) get on PYTHONPATH. So every plugin below is found the way
an installed one is, through a ``certlab.plugins`` entry point, and the shared
environment's site-packages stays as the other tests expect it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from freshenv import EXAMPLE, EXAMPLE_DISTRIBUTION, FreshEnv, build_wheels, install_layers
from freshenv import shared_fresh_env as _shared_fresh_env

# A plugin module that cannot be imported.
BROKEN_PLUGIN = 'raise RuntimeError("this plugin fails at import on purpose")\n'

# A second distribution that also provides a task family named "roman".
FORK_PLUGIN = '''\
"""Another distribution's family that takes the name roman."""

from pathlib import Path

from certlab_core.plugin import hookimpl
from certlab_core.plugin.types.family import Defect, Seed, TaskFamily

HERE = Path(__file__).parent / "family"


@hookimpl
def certlab_task_families():
    return [
        TaskFamily(
            name="roman", version="2.0.0", description="a fork that reuses the name",
            tree_dir=str(HERE / "tree"), prompt_file=str(HERE / "TASK.md"), cases_file=str(HERE / "cases.jsonl"),
            allowed_paths=["roman.py"], test_paths=["tests"], module_names=["roman"],
            defects=[Defect("d", "off-by-one", "d", [Seed("roman.py", "+ 1", "")])],
        )
    ]
'''

# A distribution that declares its entry point under a name another distribution uses.
IMPOSTOR_PLUGIN = '"""Declares the entry point roman, which certlab-family-roman already declares."""\n'


@dataclass(frozen=True)
class Throwaway:
    """A distribution written for one scenario."""

    scenario: str
    distribution: str
    version: str
    entry_point: str
    plugin_source: str

    @property
    def package(self) -> str:
        return self.distribution.replace("-", "_")

    def write(self, root: Path) -> Path:
        folder = root / self.distribution
        (folder / self.package).mkdir(parents=True)
        (folder / self.package / "__init__.py").write_text("")
        (folder / self.package / "plugin.py").write_text(self.plugin_source)
        (folder / "pyproject.toml").write_text(
            textwrap.dedent(
                f"""\
                [build-system]
                requires = ["setuptools>=68"]
                build-backend = "setuptools.build_meta"

                [project]
                name = "{self.distribution}"
                version = "{self.version}"
                dependencies = ["certlab"]

                [project.entry-points."certlab.plugins"]
                {self.entry_point} = "{self.package}.plugin"

                [tool.setuptools]
                packages = ["{self.package}"]
                """
            )
        )
        return folder


# A plugin whose hook raises, and one whose hook returns an adapter where graders belong.
RAISING_PLUGIN = '''\
"""A plugin whose agents hook raises."""

from certlab_core.plugin import hookimpl


@hookimpl
def certlab_agents():
    raise RuntimeError("no agents today")
'''

WRONG_TYPE_PLUGIN = '''\
"""A plugin that returns an AgentAdapter from its graders hook."""

from certlab_core.plugin import AgentAdapter, AgentOutcome, hookimpl


@hookimpl
def certlab_graders():
    return [AgentAdapter(name="sneaky", description="not a grader", run=lambda r: AgentOutcome(status="completed"))]
'''

# A misspelt hook (certlab_agent) and a hook function without @hookimpl.
MISSPELT_PLUGIN = '''\
"""A plugin with two mistakes its author should hear about."""

from certlab_core.plugin import hookimpl


@hookimpl
def certlab_agent():
    return []


def certlab_task_families():
    return []
'''

# A plugin that adds a command, and tries to take one of the kernel's.
COMMAND_PLUGIN = '''\
"""Adds certlab hello; its run is refused, since the kernel has one."""

from certlab_core.plugin import Command, hookimpl


def register_hello(app):
    @app.command("hello", help="Say hello from a plugin.")
    def hello(name: str = "world") -> None:
        print(f"hello, {name}, from a plugin")


def register_run(app):
    @app.command("run")
    def run() -> None:
        print("the plugin's run")


@hookimpl
def certlab_commands():
    return [
        Command(name="hello", description="say hello", register=register_hello),
        Command(name="run", description="a second run", register=register_run),
    ]
'''

THROWAWAYS = (
    Throwaway("broken", "certlab-broken-plugin", "0.3.0", "broken", BROKEN_PLUGIN),
    Throwaway("raising", "certlab-raising-plugin", "0.1.0", "raising", RAISING_PLUGIN),
    Throwaway("wrongtype", "certlab-wrongtype-plugin", "0.1.0", "wrongtype", WRONG_TYPE_PLUGIN),
    Throwaway("misspelt", "certlab-misspelt-plugin", "0.1.0", "misspelt", MISSPELT_PLUGIN),
    Throwaway("command", "certlab-hello-command", "0.1.0", "hello", COMMAND_PLUGIN),
    Throwaway("fork", "certlab-roman-fork", "2.0.0", "roman-fork", FORK_PLUGIN),
    Throwaway("impostor", "certlab-roman-impostor", "0.1.0", "roman", IMPOSTOR_PLUGIN),
)


@pytest.fixture(scope="session")
def layers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Scenario -> the folder its throwaway distribution is installed in."""
    root = tmp_path_factory.mktemp("throwaway")
    wheels = root / "wheels"
    build_wheels(wheels, [throwaway.write(root / "src") for throwaway in THROWAWAYS])
    installed = {throwaway.scenario: root / "layers" / throwaway.scenario for throwaway in THROWAWAYS}
    install_layers(
        {
            installed[throwaway.scenario]: [wheels / f"{throwaway.package}-{throwaway.version}-py3-none-any.whl"]
            for throwaway in THROWAWAYS
        }
    )
    return installed


@pytest.fixture(scope="session")
def fresh(layers: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> FreshEnv:
    """The shared fresh environment; the layers come first, built while another worker may still build it."""
    return _shared_fresh_env(tmp_path_factory)


def installed_plugin_names(fresh: FreshEnv) -> set[str]:
    """The entry point names of certlab's own distributions and of the third party's family."""
    names = set()
    for _name, folder in [*fresh.distributions, ("", EXAMPLE)]:
        project = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
        names |= set(project.get("entry-points", {}).get("certlab.plugins", {}))
    return names


def one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.fixture(scope="module")
def only_two(fresh: FreshEnv, layers: dict[str, Path]) -> dict[str, Any]:
    """``certlab plugins --json`` with CERTLAB_PLUGINS naming two plugins, a broken one installed too."""
    completed = fresh.certlab("plugins", "--json", layers=[layers["broken"]], plugins="roman, calibration")
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


def test_certlab_plugins_loads_only_the_plugins_named(only_two: dict[str, Any]) -> None:
    assert [(p["name"], p["distribution"]) for p in only_two["plugins"]] == [
        ("calibration", "certlab-calibration"),
        ("roman", EXAMPLE_DISTRIBUTION),
    ]


def test_a_plugin_not_named_is_never_imported(only_two: dict[str, Any]) -> None:
    assert only_two["failures"] == []


def test_naming_a_plugin_that_is_not_installed_is_one_clear_line(fresh: FreshEnv) -> None:
    completed = fresh.certlab("plugins", plugins="roman,no-such-plugin")
    assert completed.returncode == 4
    line = one_error_line(completed.stderr)
    assert "CERTLAB_PLUGINS" in line and "no-such-plugin" in line and "roman" not in line


def test_a_broken_plugin_is_reported_in_one_line_and_the_others_still_load(
    fresh: FreshEnv, layers: dict[str, Path]
) -> None:
    completed = fresh.certlab("plugins", layers=[layers["broken"]])
    assert completed.returncode == 0, completed.stderr
    line = one_error_line(completed.stderr)
    assert line == (
        "broken plugin broken (certlab-broken-plugin): RuntimeError: this plugin fails at import on purpose"
    )
    listed = {row.split()[0] for row in completed.stdout.splitlines() if row.strip()}
    assert listed == installed_plugin_names(fresh)


def test_two_distributions_providing_one_family_name_are_refused_naming_both(
    fresh: FreshEnv, layers: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "certification"
    completed = fresh.certlab(
        "certify", "--family", "roman", "--agent", "oracle", "--out", str(out), layers=[layers["fork"]]
    )
    assert completed.returncode == 4, completed.stdout + completed.stderr
    line = one_error_line(completed.stderr)
    assert "task family 'roman'" in line
    assert EXAMPLE_DISTRIBUTION in line and "certlab-roman-fork" in line
    assert not (out / "bundle.json").exists()


def test_an_unknown_family_no_distribution_provides_lists_the_valid_names_and_broken_plugins(
    fresh: FreshEnv, layers: dict[str, Path], tmp_path: Path
) -> None:
    # prove, since certify refuses before anything while a plugin that cannot import is installed
    completed = fresh.certlab("prove", "--family", "romans", layers=[layers["broken"]])
    assert completed.returncode == 4, completed.stdout + completed.stderr
    warning, line = [line for line in completed.stderr.splitlines() if line.strip()]
    assert warning == (
        "certlab: warning: broken plugin broken (certlab-broken-plugin): RuntimeError: this plugin fails at import "
        "on purpose"
    )
    valid = re.search(r"unknown task family 'romans' \(valid: ([^)]*)\)", line)
    assert valid is not None, line
    assert {"intervals", "ledger", "roman"} <= set(valid.group(1).split(", "))
    assert "pip install" not in line
    assert "plugins that failed to load: broken (certlab-broken-plugin): RuntimeError: this plugin fails" in line


def test_two_distributions_declaring_one_plugin_name_are_listed_as_broken_naming_both(
    fresh: FreshEnv, layers: dict[str, Path]
) -> None:
    completed = fresh.certlab("plugins", layers=[layers["impostor"]])
    assert completed.returncode == 0, completed.stdout + completed.stderr
    line = one_error_line(completed.stderr)
    assert "'roman'" in line
    assert EXAMPLE_DISTRIBUTION in line and "certlab-roman-impostor" in line
    assert fresh.certlab("plugins", "--check", layers=[layers["impostor"]]).returncode == 1


def test_a_hook_that_raises_or_returns_the_wrong_record_is_named_and_the_rest_keep_working(
    fresh: FreshEnv, layers: dict[str, Path]
) -> None:
    both = [layers["raising"], layers["wrongtype"]]
    completed = fresh.certlab("plugins", layers=both)
    assert completed.returncode == 0, completed.stderr
    assert "Traceback" not in completed.stderr and "internal error" not in completed.stderr
    errors = sorted(line for line in completed.stderr.splitlines() if line.strip())
    assert errors == [
        "broken plugin raising (certlab-raising-plugin, hook certlab_agents): raised RuntimeError: no agents today",
        "broken plugin wrongtype (certlab-wrongtype-plugin, hook certlab_graders): "
        "returned a AgentAdapter where a Grader belongs",
    ]
    listed = {row.split()[0] for row in completed.stdout.splitlines() if row.strip()}
    assert {"intervals", "policy", "calibration", "raising", "wrongtype"} <= listed
    rows = {row.split()[0]: row for row in completed.stdout.splitlines() if row.strip()}
    assert "sneaky" not in rows["wrongtype"] and "(nothing)" in rows["wrongtype"]
    # any other command still runs, and the refused grader never enters a chain
    stats = fresh.certlab("stats", "bounds", "--baseline", "200/200", "--candidate", "130/200", layers=both)
    assert stats.returncode == 0 and "verdict: BLOCK" in stats.stdout, stats.stdout + stats.stderr


def test_a_misspelt_hook_marks_its_plugin_broken_and_a_hook_without_hookimpl_is_a_warning_check_turns_into_exit_1(
    fresh: FreshEnv, layers: dict[str, Path]
) -> None:
    plain = fresh.certlab("plugins", layers=[layers["misspelt"]])
    assert plain.returncode == 0, plain.stderr
    lines = sorted(line for line in plain.stderr.splitlines() if line.strip())
    assert lines == [
        "broken plugin misspelt (certlab-misspelt-plugin, hook certlab_agent): implements certlab_agent, which no "
        "certlab hook spec defines (did you mean certlab_agents?)",
        "warning: plugin misspelt (certlab-misspelt-plugin): defines certlab_task_families without @hookimpl, "
        "so certlab never calls it",
    ]
    checked = fresh.certlab("plugins", "--check", layers=[layers["misspelt"]])
    assert checked.returncode == 1
    assert fresh.certlab("plugins", "--check").returncode == 0


def test_two_plugins_providing_one_family_name_are_both_shown_and_refused_only_when_used(
    fresh: FreshEnv, layers: dict[str, Path]
) -> None:
    completed = fresh.certlab("plugins", layers=[layers["fork"]])
    assert completed.returncode == 0, completed.stderr
    rows = {row.split()[0]: row for row in completed.stdout.splitlines() if row.strip()}
    assert "task family: roman" in rows["roman"] and "task family: roman" in rows["roman-fork"]
    (warning,) = [line for line in completed.stderr.splitlines() if line.strip()]
    assert "'roman' is provided by" in warning and "certlab-roman-fork" in warning
    # an unrelated command that never asks for 'roman' is untouched
    stats = fresh.certlab("stats", "bounds", "--baseline", "10/10", "--candidate", "10/10", layers=[layers["fork"]])
    assert stats.returncode in (0, 2), stats.stderr


def test_a_plugin_adds_a_command_and_cannot_take_a_kernel_command(fresh: FreshEnv, layers: dict[str, Path]) -> None:
    hello = fresh.certlab("hello", "--name", "Ada", layers=[layers["command"]])
    assert (hello.returncode, hello.stdout) == (0, "hello, Ada, from a plugin\n"), hello.stderr
    assert "which the kernel's own command takes" not in hello.stderr  # its own line weighs only its own command
    listed = fresh.certlab("--help", layers=[layers["command"]])
    # the command list comes from the records, so it shows the record's description (no command module loads)
    assert "hello" in listed.stdout and "Say hello" in listed.stdout
    assert "provides the command 'run', which the kernel's own command takes; it is ignored" in listed.stderr
    kernel_run = fresh.certlab("run", "--help", layers=[layers["command"]])
    assert kernel_run.returncode == 0 and "the plugin's run" not in kernel_run.stdout
    assert "A/B" in kernel_run.stdout or "descriptor" in kernel_run.stdout.lower()
    shown = fresh.certlab("plugins", layers=[layers["command"]])
    (row,) = [r for r in shown.stdout.splitlines() if r.startswith("hello ")]
    assert "command: hello, run" in row


def test_discovery_scans_the_entry_points_once_and_writes_nothing_in_the_users_home(tmp_path: Path) -> None:
    # stevedore, which discovery used, kept a cache of every entry point it had scanned in the user's
    # ~/.cache/python-entrypoints: a write outside certlab's own folders on every command.
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_CACHE_HOME", "CERTLAB_PLUGINS")}
    env["HOME"] = str(home)
    code = (
        "from certlab_core._runtime.registry import discover; r = discover(); print(len(r.plugins()), len(r.failures))"
    )
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    plugins, failures = map(int, result.stdout.split())
    assert plugins > 10 and failures == 0, result.stdout
    assert sorted(p.relative_to(home).as_posix() for p in home.rglob("*")) == []
    import certlab_core._runtime.registry as registry

    assert "stevedore" not in Path(registry.__file__).read_text(encoding="utf-8")
