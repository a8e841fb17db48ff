"""tests/checkpoint: remove the per-process directory of source files the resume recipes write."""

import os
import shutil
import tempfile

import pytest


@pytest.fixture(scope="session", autouse=True)
def _remove_recipe_files():
    yield
    shutil.rmtree(os.path.join(tempfile.gettempdir(), f"jaxfeed-resume-{os.getpid()}"), ignore_errors=True)
