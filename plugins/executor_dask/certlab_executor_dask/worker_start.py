"""A local worker's preload: start its zygote host as the worker starts.

Dask imports this module in each worker process of a cluster the session starts (the
worker's ``preload``) and calls ``dask_setup``. The host's interpreter start and its
imports of the trial machinery then overlap the cluster's start, before the run store
exists, instead of sitting in every worker's first warm-up at once.
"""

from __future__ import annotations

from typing import Any

from certlab_core.sdk.executor import start_zygote_host


def dask_setup(worker: Any) -> None:
    start_zygote_host()
