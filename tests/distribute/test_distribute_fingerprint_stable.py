"""A distributed iterator's state holds each worker pipeline's fingerprint, and a restore refuses a state whose
fingerprint differs: the worker graph's fingerprint must not change when the code around it is refactored
(auto-shard became a pass of ``run_passes``; the worker graph is now ``AutoShard(...)``). These values were
computed before that change (commit 517b772); graphs without user functions, so they do not depend on the
Python version's bytecode."""

import pytest

import jaxfeed.distribute as jd
from jaxfeed.pipeline import Dataset, Options
from jaxfeed.pipeline.options import AutoShardPolicy


def _policy(ds, policy):
    o = Options()
    o.experimental_distribute.auto_shard_policy = policy
    return ds.with_options(o)


GRAPHS = {
    "auto_data": lambda: Dataset.range(40).batch(8),
    "data_prefetch": lambda: _policy(Dataset.range(40).shuffle(10, seed=3).batch(8), AutoShardPolicy.DATA).prefetch(2),
    "off": lambda: _policy(Dataset.range(40).batch(8), AutoShardPolicy.OFF),
}

EXPECTED = {  # (graph, replicas, workers, worker) -> the worker pipeline's fingerprint at 517b772
    ("auto_data", 8, 1, 0): "7b5b1f9d93d39755059fcf3e",
    ("auto_data", 8, 2, 1): "9de6848eaa1ff03f9e8ca048",
    ("auto_data", 4, 4, 3): "322ed8aa4aae724598b6c0db",
    ("data_prefetch", 8, 1, 0): "087c73d1686d3e7231ccdeff",
    ("data_prefetch", 8, 2, 1): "060f222be5fff209afc2b9d1",
    ("data_prefetch", 4, 4, 3): "0ba38f22b48395a5ae663eb1",
    ("off", 8, 1, 0): "f8194e672982343ef5672e42",
    ("off", 8, 2, 1): "f8194e672982343ef5672e42",
    ("off", 4, 4, 3): "bf37709e119e118789673884",
}


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_worker_pipeline_fingerprint_does_not_change(case):
    name, replicas, workers, worker = case
    dds = jd.DistributedDataset.from_dataset(jd.InputFeed.layout(replicas, workers, worker), GRAPHS[name]())
    assert dds._datasets[0].fingerprint() == EXPECTED[case]


def test_auto_shard_runs_in_its_pass_phase_and_explain_shows_it():
    text = jd.DistributedDataset.from_dataset(jd.InputFeed.layout(8, 2, 1), Dataset.range(40).batch(8)).explain()
    assert "[auto_shard] " in text and "DATA: worker 1 of 2 keeps output elements 1::2" in text
