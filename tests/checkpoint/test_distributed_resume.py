"""Distributed iterators resume exactly: each worker saves its own state; a restored job with the same
worker count continues where every worker was.

- two workers made by ``jaxfeed.distribute.auto_shard(ds, 2, i)`` over random pipelines (hypothesis);
- a ``MirroredStrategy`` distributed iterator (8 CPU devices) with steps read ahead in its buffer;
- two processes on 127.0.0.1 (``MultiWorkerMirroredStrategy``), saved through ``CheckpointManager`` and
  restored by two *new* processes.
"""

import json
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import resume_recipes as R
from local_cluster import assert_ok, launch
from jaxfeed.pipeline import Dataset, checkpoint
from jaxfeed.pipeline.errors import InvalidArgumentError
from jaxfeed.pipeline.testing import assert_elements_equal

jd = pytest.importorskip("jaxfeed.distribute")
HERE = os.path.dirname(os.path.abspath(__file__))
FILES = os.path.join(__import__("tempfile").gettempdir(), f"jaxfeed-resume-{os.getpid()}")
OPS = list(R.available_ops())


def worker_outputs(recipe, index):
    it = iter(jd.auto_shard(R.build(recipe), 2, index))
    out = [e for _, e in zip(range(R.MAX_ELEMENTS + 1), it)]
    it.close()
    return out


@settings(max_examples=12, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(R.recipes(FILES, ops=OPS, max_ops=4))
def test_two_auto_sharded_workers_each_resume_exactly_after_every_element(recipe):
    from hypothesis import assume

    try:
        expected = [worker_outputs(recipe, i) for i in range(2)]
    except InvalidArgumentError as e:  # auto-shard's rule: fewer elements than workers is an error
        assume("not enough" not in str(e))
        raise
    if max(map(len, expected)) > R.MAX_ELEMENTS:
        recipe = dict(recipe, ops=recipe["ops"] + [["take", {"count": R.MAX_ELEMENTS}]])
        expected = [worker_outputs(recipe, i) for i in range(2)]
    for k in range(max(map(len, expected)) + 1):
        states, heads = [], []
        for i in range(2):  # both workers save at the same step (each at most its length)
            it = iter(jd.auto_shard(R.build(recipe), 2, i))
            heads.append([next(it) for _ in range(min(k, len(expected[i])))])
            states.append(checkpoint.serialize(it.get_state()))
            it.close()
        for i in range(2):
            restored = jd.auto_shard(R.build(recipe), 2, i).make_iterator(state=states[i])
            assert_elements_equal(heads[i] + list(restored), expected[i],
                                  what=f"worker {i} of {json.dumps(recipe)} resumed after {k}")
            restored.close()


def test_a_worker_state_restored_on_the_other_worker_is_refused():
    ds = Dataset.range(20).batch(2)
    state = iter(jd.auto_shard(ds, 2, 0)).get_state()
    with pytest.raises(Exception, match="different pipeline"):
        jd.auto_shard(ds, 2, 1).make_iterator(state=state)


# ---------------------------------------------------------------------------------- one process, 8 devices
def local_steps(strategy, it):
    return [[np.asarray(v).tolist() for v in strategy.experimental_local_results(step)] for step in it]


def make_distributed(strategy):
    ds = Dataset.range(100).shuffle(30, seed=5).map(lambda x: x * 10).batch(16)
    return strategy.experimental_distribute_dataset(ds)


def test_mirrored_distributed_iterator_resumes_exactly_after_every_step(tmp_path):
    strategy = jd.MirroredStrategy([f"cpu:{i}" for i in range(4)])
    expected = local_steps(strategy, iter(make_distributed(strategy)))
    for k in range(len(expected) + 1):
        it = iter(make_distributed(strategy))
        head = [[np.asarray(v).tolist() for v in strategy.experimental_local_results(next(it))]
                for _ in range(k)]
        path = str(tmp_path / f"{k}.state")
        checkpoint.save(it, path)
        rest_of_saved = local_steps(strategy, it)  # saving must not disturb the saved iterator
        it.close()
        restored = checkpoint.restore(make_distributed(strategy), path)
        tail = local_steps(strategy, restored)
        restored.close()
        assert head + tail == expected, f"resumed after {k} steps"
        assert rest_of_saved == tail


# ---------------------------------------------------------------------------------- two processes
def run_workers(mode, tmp_path, k):
    """The results of two processes running ``distributed_task.py MODE TMP_PATH K OUT``."""
    task = os.path.join(HERE, "distributed_task.py")
    results = launch(tmp_path, mode, 2, lambda out: [task, mode, str(tmp_path), str(k), str(out)], timeout=240)
    assert_ok(results)
    return [r["result"] for r in results]


def test_two_process_job_restored_by_two_new_processes_continues_exactly(tmp_path):
    k = 2
    saved = run_workers("save", tmp_path, k)
    restored = run_workers("restore", tmp_path, k)
    for i in range(2):
        assert saved[i]["head"] + restored[i]["tail"] == saved[i]["all"], f"worker {i}"
        assert restored[i]["tail"] == saved[i]["rest"]
    assert saved[0]["all"] != saved[1]["all"]  # the workers read different data
