"""The constructed calibration agents pass AdapterConformance: each completes or is unavailable, touching only its work.

The oracle, the test deleter and the forbidden-file agent are not among them: what they do to a
task (``AgentRequest.task``) is checked by every family's ``FamilyConformance``, which runs them.
"""

from __future__ import annotations

import pytest

from certlab_core.testing import AdapterConformance, Scenario


class TestNullConformance(AdapterConformance):
    adapter_name = "null"


class TestUnavailableConformance(AdapterConformance):
    adapter_name = "unavailable"
    unavailable = Scenario()

    def test_a_normal_run_completes_and_leaves_nothing_behind(self) -> None:  # type: ignore[override]
        pytest.skip("the constructed unavailable agent has no normal run: every run is its outage")

    def test_it_writes_nowhere_but_the_work_copy(self) -> None:  # type: ignore[override]
        pytest.skip("checked on its outage by test_it_reports_its_own_infrastructure_failure_as_unavailable")
