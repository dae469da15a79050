"""The command adapter passes AdapterConformance: a shell command line as the agent, exit 75 as its outage."""

from __future__ import annotations

from certlab_core.testing import AdapterConformance, Scenario


class TestCommandConformance(AdapterConformance):
    adapter_name = "command"
    normal = Scenario(args=("cat README.md >/dev/null; echo fixed >> README.md",))
    hanging = Scenario(args=("sleep 30",))
    unavailable = Scenario(args=("echo 'the agent service is down' >&2; exit 75",))
