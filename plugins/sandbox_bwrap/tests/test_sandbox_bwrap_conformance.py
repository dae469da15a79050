"""The bwrap sandbox passes SandboxConformance: it hides, refuses writes, contains the environment, stops and limits."""

from __future__ import annotations

from certlab_core.testing import SandboxConformance


class TestBwrapConformance(SandboxConformance):
    sandbox_name = "bwrap"
