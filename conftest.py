"""The whole test run's guard: a test that leaves a thread running fails.

Many tests fork in their worker's own process (a zygote, a trial's fork), and certlab refuses
to fork while another thread runs: a thread one test leaves behind (an SDK's process watcher,
a pool never shut down) failed a later, unrelated test on the same xdist worker, now and then,
under load. So each test's call is watched: a thread it started that is still running after
its teardown, given ``LINGER_S`` to end, fails that test's teardown, naming the thread.
Threads a fixture starts while setting up are the fixture's (a module's server, stopped at
the module's end) and are not counted.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Generator

import pytest

#: How long a thread the test started may take to end after the test's teardown.
LINGER_S = 10.0
THREADS_BEFORE_CALL = pytest.StashKey[frozenset[threading.Thread]]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    item.stash[THREADS_BEFORE_CALL] = frozenset(threading.enumerate())
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    result = yield
    before = item.stash.get(THREADS_BEFORE_CALL, None)
    if before is None:  # the call did not run (its setup failed or skipped)
        return result
    # a foreign thread (one started outside threading, seen only as a dummy) is not ours to wait for
    started = [t for t in threading.enumerate() if t not in before and type(t).__name__ != "_DummyThread"]
    ends = time.monotonic() + LINGER_S
    for thread in started:
        thread.join(max(0.0, ends - time.monotonic()))
    left = sorted(thread.name for thread in started if thread.is_alive())
    if left:
        raise AssertionError(
            f"the test left {len(left)} thread(s) running {LINGER_S:g} s after its teardown: {', '.join(left)}; "
            "stop what started them in the test (a later test forking in this worker would refuse)"
        )
    return result
