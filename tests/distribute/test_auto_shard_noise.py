"""Auto-sharding stays quiet where nothing is wrong and says briefly what it did (issue 15 item 10)."""

import logging

import numpy as np
import pytest

from jaxfeed import distribute as jd
from jaxfeed.pipeline import AutoShardPolicy, Dataset, Options


def with_policy(ds, policy):
    o = Options()
    o.experimental_distribute.auto_shard_policy = policy
    return ds.with_options(o)


def slices():
    return Dataset.from_tensor_slices((np.arange(100, dtype=np.float64), np.arange(100) * 7)).batch(8)


@pytest.fixture(scope="module")
def s2():
    return jd.MirroredStrategy(["cpu:0", "cpu:1"])


def test_single_worker_distribute_logs_no_auto_shard_warning(s2, caplog):
    with caplog.at_level(logging.WARNING, logger="jaxfeed"):
        s2.experimental_distribute_dataset(slices())
    assert "auto_shard" not in caplog.text


def test_auto_shard_warning_on_several_workers_describes_arrays_by_shape_not_contents(caplog):
    with caplog.at_level(logging.WARNING, logger="jaxfeed"):
        jd.auto_shard(slices(), 2, 0)
    assert "AUTO fell back to DATA" in caplog.text
    assert "TensorSlices(tensors=(<float64[100]>, <int64[100]>))" in caplog.text
    assert "array(" not in caplog.text and "0.,  1." not in caplog.text and len(caplog.text) < 400


def test_file_policy_on_one_worker_leaves_a_pipeline_without_readers_as_it_is(s2):
    ds = with_policy(Dataset.from_tensor_slices(np.arange(10)).batch(4), AutoShardPolicy.FILE)
    assert [b.tolist() for b in jd.auto_shard(ds, 1, 0).as_numpy()] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    dist = s2.experimental_distribute_dataset(ds)
    got = sorted(int(x) for step in dist for v in s2.experimental_local_results(step) for x in np.asarray(v))
    assert got == list(range(10))
    assert "one worker" in dist.decision.reason


def test_file_policy_on_several_workers_still_refuses_a_pipeline_without_readers():
    from jaxfeed.pipeline.errors import NotFoundError

    ds = with_policy(Dataset.from_tensor_slices(np.arange(10)).batch(4), AutoShardPolicy.FILE)
    with pytest.raises(NotFoundError, match="unshardable source dataset: TensorSlices"):
        jd.auto_shard(ds, 2, 0)
