"""numpy and scipy.special for the rules, loaded with one BLAS thread.

The rules' arithmetic is elementwise (scipy.special's beta inverses, numpy's ufuncs); none of
it calls a BLAS. Yet numpy and scipy each load an OpenBLAS of their own, and each OpenBLAS
starts a thread per CPU as it loads, threads that spin as they start: about 0.2 CPU s of a
``certlab gate`` (``bench/startup.py`` prints its CPU). Each function of the rules that
imports numpy or scipy calls :func:`load` first: a module this process has not imported yet
is imported with ``OPENBLAS_NUM_THREADS=1`` (unless the user set a thread count, which
holds), and the setting is taken back out of ``os.environ`` at once, so no process certlab
starts afterwards inherits it.
"""

from __future__ import annotations

import importlib
import os
import sys

BLAS_THREADS = "OPENBLAS_NUM_THREADS"


def load(*modules: str) -> None:
    """Import ``modules`` (``"numpy"``, ``"scipy.special"``) where this process has not, each BLAS at one thread."""
    missing = [name for name in modules if name not in sys.modules]
    if not missing:
        return
    ours = BLAS_THREADS not in os.environ
    if ours:
        os.environ[BLAS_THREADS] = "1"
    try:
        for name in missing:
            importlib.import_module(name)
    finally:
        if ours:
            os.environ.pop(BLAS_THREADS, None)
