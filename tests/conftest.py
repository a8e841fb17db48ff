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
