import json
import pathlib

import pytest

DATA = pathlib.Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="session")
def data_dir():
    return DATA


@pytest.fixture(scope="session")
def manifest():
    return json.loads((DATA / "manifest.json").read_text())
