"""A local worker's preload: its zygote host starts and stops with it.

Dask imports this module in each worker process of a cluster the session starts (the
worker's ``preload``) and calls ``dask_setup``. The host's interpreter start and its
imports of the trial machinery then overlap the cluster's start, before the run store
exists, instead of sitting in every worker's first warm-up at once. As the worker closes,
``dask_teardown`` stops its zygotes and their host, and waits for them: they end before the
worker does, and their CPU time (their trials' included) is counted in the worker's.
"""

from __future__ import annotations

from typing import Any

from certlab_core.sdk.executor import close_isolated, start_zygote_host


def dask_setup(worker: Any) -> None:
    start_zygote_host()


def dask_teardown(worker: Any) -> None:
    close_isolated()
