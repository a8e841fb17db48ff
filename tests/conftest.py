"""Test-wide setup. JAX reads XLA_FLAGS once, when its backend starts: force 8 CPU devices before any
test imports JAX, so distribute tests see 8 replicas on this 2-core machine."""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pytest  # noqa: E402

from jaxfeed.pipeline import random_seed  # noqa: E402


@pytest.fixture(autouse=True)
def _reset_global_seed():
    """Tests must not leak a global seed (or determinism mode, or debug mode) into each other."""
    yield
    random_seed.set_global_seed(None)
    from jaxfeed.pipeline.passes import debug_mode

    debug_mode.disable_debug_mode()
    try:
        from jaxfeed.determinism import config

        config._reset_for_tests()
    except (ImportError, AttributeError):
        pass
    import sys

    process_map = sys.modules.get("jaxfeed.pipeline.iterators.process_map")
    if process_map is not None:  # map workers kept for a next iterator are not the next test's
        shared_memory = sys.modules["jaxfeed.pipeline.engine.shared_memory"]
        if any(not pool.closed for pool in list(shared_memory._HANDING_OUT)):
            import gc  # an iterator of this test held in a reference cycle (an error's traceback reaches it)
            gc.collect()  # retires its pool when collected: here, not in a later test that counts segments
        process_map.close_idle_pools()


class ThreadClock:
    """Fake seconds of work done on the calling thread (``work``): a stage's work and its consumer's work
    advance only their own thread's time, however fast or loaded the machine is."""

    def __init__(self):
        import threading

        self._local = threading.local()

    def __call__(self):
        return getattr(self._local, "now", 0.0)

    def work(self, seconds):
        self._local.now = self() + seconds


@pytest.fixture
def thread_clock(monkeypatch):
    """A ``ThreadClock`` in place of the clock the on-demand judges time calls with (engine/overlap.py)."""
    from jaxfeed.pipeline.engine import overlap

    clock = ThreadClock()
    monkeypatch.setattr(overlap, "clock", clock)
    return clock


class FlippingJudge:
    """An on-demand judge that changes its mind at random calls (seeded): a producer thread parks and runs
    again all the time, so order, errors and states are checked across many changes of mode."""

    def __init__(self, window=1):
        import random

        self.on_demand, self.moves, self.last_ratio = False, 0, 0.0
        self._rng = random.Random(7)

    def observe(self, away, making):
        if self._rng.random() < 0.5:
            self.on_demand = not self.on_demand
            self.moves += 1
            return True
        return False

    def describe(self, what="element"):
        return "on demand" if self.on_demand else "thread"


@pytest.fixture
def flipping_judge(monkeypatch):
    """``FlippingJudge`` in place of ``engine/overlap.py``'s ``OverlapJudge`` for the stages built meanwhile."""
    from jaxfeed.pipeline.engine import overlap

    monkeypatch.setattr(overlap, "OverlapJudge", FlippingJudge)


def _drain(it, limit=None, value=lambda x: x.tolist()):
    """What ``it`` yields, ``value(x)`` for each element and the message of each ValueError in its place, up
    to ``limit`` entries (all by default)."""
    out = []
    while limit is None or len(out) < limit:
        try:
            out.append(value(next(it)))
        except ValueError as e:
            out.append(str(e))
        except StopIteration:
            break
    return out


@pytest.fixture
def drain():
    """``_drain``: an iterator's elements with its errors in place (pipelines that fail at some elements)."""
    return _drain
