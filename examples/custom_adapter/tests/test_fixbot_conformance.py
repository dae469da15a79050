"""The fixbot adapter runs certlab's adapter conformance suite against itself: four checks, three lines of set-up."""

from pathlib import Path

from certlab_core.testing import AdapterConformance, Scenario

BIN = str(Path(__file__).resolve().parent.parent)  # where the stand-in fixbot CLI lives


class TestFixbot(AdapterConformance):
    adapter_name = "fixbot"
    path = BIN
    hanging = Scenario(env={"FIXBOT_MODE": "hang"})
    unavailable = Scenario(env={"FIXBOT_MODE": "no-api"})
