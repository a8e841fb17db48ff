"""Determinism tests enable determinism in a process whose JAX backend may already have started (another
test ran JAX first): the documented DeterminismWarning is expected there and not worth repeating."""

import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/determinism/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.filterwarnings(
                "ignore::jaxfeed.determinism.config.DeterminismWarning"))
