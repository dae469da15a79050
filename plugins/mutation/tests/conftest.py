"""Fixtures of certlab-mutation's own tests: the installed plugins, discovered once."""

from __future__ import annotations

import pytest

from certlab_core._runtime.registry import Registry, discover


@pytest.fixture(scope="session")
def registry() -> Registry:
    return discover()
