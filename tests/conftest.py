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
