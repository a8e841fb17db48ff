"""Done-when (a) and (b): a full pipeline is byte-identical under determinism whatever the parallelism;
with determinism off and deterministic=False it may reorder, and the checker catches it."""

import time

import numpy as np
import pytest

from jaxfeed import determinism
from jaxfeed.determinism.checker import check_determinism, element_fingerprint
from jaxfeed.pipeline import AUTOTUNE, Dataset

from determinism_pipelines import UnevenWork  # uneven work: one element finishes late


def decode(x):  # pure work: runs in parallel, on threads or processes
    return np.sin(np.arange(4, dtype=np.float32) + x)


def augment(v, rng):  # per-element randomness: stays parallel under determinism
    return v + rng.normal(size=v.shape).astype(np.float32), rng.integers(0, 100)


def uneven(v):  # some elements take longer than others
    if int(abs(v[0]) * 1000) % 5 == 0:
        time.sleep(0.002)
    return v


def build(npc=None, executor=None, deterministic=None, slow=uneven):
    ds = Dataset.range(6).interleave(lambda i: Dataset.range(i * 10, i * 10 + 8), cycle_length=3,
                                     num_parallel_calls=npc, deterministic=deterministic)
    ds = ds.shuffle(16, seed=5)
    ds = ds.map(decode, num_parallel_calls=npc, executor=executor, deterministic=deterministic)
    ds = ds.map(slow, num_parallel_calls=npc, deterministic=deterministic)
    ds = ds.map(augment, num_parallel_calls=npc, with_rng=True, seed=2, deterministic=deterministic)
    return ds.batch(4).prefetch(2)


def fingerprints(ds):
    return [element_fingerprint(e) for e in ds]


@pytest.fixture
def on():
    determinism.enable_op_determinism()
    determinism.set_random_seed(1)


def test_pipeline_is_byte_identical_across_runs_and_thread_parallelism(on):
    reference = fingerprints(build(None))
    assert len(reference) == 12
    for npc in (1, 2, AUTOTUNE):
        for _ in range(3):
            assert fingerprints(build(npc, deterministic=False)) == reference, npc


def test_pipeline_is_byte_identical_with_process_workers(on):
    reference = fingerprints(build(None))
    for npc in (1, 2, AUTOTUNE):
        assert fingerprints(build(npc, executor="process", deterministic=False)) == reference, npc


def test_checker_reports_the_pipeline_deterministic_under_determinism(on):
    report = check_determinism(lambda: build(2, deterministic=False), runs=3, parallelism=[1, 2, AUTOTUNE])
    assert report.deterministic and report.elements == 12
    assert str(report) == "deterministic over 12 elements (3 runs)"


def test_without_determinism_deterministic_false_reorders_and_the_checker_catches_it():
    report = check_determinism(lambda: build(2, deterministic=False, slow=UnevenWork()), runs=2,
                               variants=[{"deterministic": True}, {"deterministic": False}])
    assert not report.deterministic
    assert report.culprit is not None and "deterministic=False" in report.culprit
