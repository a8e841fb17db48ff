"""determinism.manifest: a JSON record to replay a run, and what changed since the last one."""

import json
import os

import numpy as np

from jaxfeed import determinism
from jaxfeed.determinism import run_manifest
from jaxfeed.formats import TextLineDataset
from jaxfeed.pipeline import Dataset


def text_pipeline(path):
    return TextLineDataset([path]).shuffle(8).map(lambda line: line.upper())


def test_manifest_is_json_with_versions_seeds_fingerprint_and_settings(tmp_path):
    determinism.enable_op_determinism()
    determinism.set_random_seed(3)
    ds = Dataset.range(10).shuffle(10).map(lambda x, rng: x + rng.integers(2), with_rng=True, seed=4)
    m = json.loads(json.dumps(determinism.manifest(ds)))
    assert m["packages"]["numpy"] == np.__version__ and m["packages"]["jaxfeed"]
    assert m["global_seed"] == 3
    assert sorted(m["op_seeds"]) == ["1:Shuffle", "2:Map"] and m["op_seeds"]["2:Map"] == [3, 4]
    assert m["graph_fingerprint"] == ds.fingerprint()
    assert m["determinism"]["op_determinism"] is True
    assert any(k.endswith("map_func") for k in m["functions"])


def test_manifest_records_input_files_through_fsspec(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes(b"x\ny\n")
    determinism.set_random_seed(1)
    (entry,) = determinism.manifest(text_pipeline(str(path)))["input_files"]
    assert entry["path"] == str(path) and entry["size"] == 4 and "mtime" in entry


def test_second_manifest_says_which_input_changed(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes(b"x\ny\n")
    determinism.set_random_seed(1)
    first = determinism.manifest(text_pipeline(str(path)))
    path.write_bytes(b"x\ny\nz\n")
    os.utime(path, (1_000_000_000, 1_000_000_000))
    changes = determinism.manifest(text_pipeline(str(path)), compare_to=first)["changes"]
    assert f"input file {path}: size 4 -> 6" in changes
    assert any(c.startswith(f"input file {path}: mtime") for c in changes)


def test_unchanged_run_reports_no_changes(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes(b"x\n")
    determinism.set_random_seed(1)
    saved = tmp_path / "manifest.json"
    run_manifest.save(determinism.manifest(text_pipeline(str(path))), str(saved))
    assert determinism.manifest(text_pipeline(str(path)), compare_to=str(saved))["changes"] == []


def test_changed_seed_and_in_memory_data_are_reported():
    determinism.set_random_seed(1)
    first = determinism.manifest(Dataset.from_tensor_slices(np.arange(5)).shuffle(5))
    determinism.set_random_seed(2)
    changes = determinism.manifest(Dataset.from_tensor_slices(np.arange(5) + 1).shuffle(5), compare_to=first)[
        "changes"]
    assert "global_seed: 1 -> 2" in changes
    assert any(c.startswith("input_data.0:TensorSlices") for c in changes)
    assert any(c.startswith("op_seeds.1:Shuffle") for c in changes)
