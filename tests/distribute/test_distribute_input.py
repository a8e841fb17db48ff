"""Distributed datasets: the per-replica split rules (docs/tf-behaviour.md#per-replica-split), padding, element_spec, state."""

import jax
import numpy as np
import pytest

from jaxfeed import distribute as jd
from jaxfeed.distribute.rebatch import BalancedRebatch, balanced_sizes, legacy_sizes
from jaxfeed.formats import TFRecordDataset, TFRecordWriter
from jaxfeed.pipeline import AutoShardPolicy, Dataset, Options


def strategy(n):
    return jd.MirroredStrategy([f"cpu:{i}" for i in range(n)])


@pytest.fixture(scope="module")
def s2():
    return strategy(2)


@pytest.fixture(scope="module")
def s3():
    return strategy(3)


def off(ds):
    o = Options()
    o.experimental_distribute.auto_shard_policy = AutoShardPolicy.OFF
    return ds.with_options(o)


def steps(strategy_, ds, options=None):
    out = []
    for step in strategy_.experimental_distribute_dataset(ds, options):
        out.append([np.asarray(v).tolist() for v in strategy_.experimental_local_results(step)])
    return out


# ------------------------------------------------------------------ the size rules
@pytest.mark.parametrize("b, w, r, worker, expected", [
    (4, 1, 3, 0, [2, 1, 1]), (7, 1, 3, 0, [3, 2, 2]), (3, 1, 4, 0, [1, 1, 1, 0]),
    (7, 2, 2, 0, [2, 2, 2, 1]), (7, 2, 2, 1, [2, 1, 2, 2]),
    (5, 3, 1, 0, [2, 2, 1]), (5, 3, 1, 1, [2, 1, 2]), (5, 3, 1, 2, [1, 2, 2])])
def test_balanced_sizes_follow_tf_distribute(b, w, r, worker, expected):
    assert balanced_sizes(b, w, r, worker) == expected


@pytest.mark.parametrize("b, n, expected", [(4, 3, [2, 2, 0]), (7, 3, [3, 3, 1]), (6, 4, [2, 2, 2, 0]),
                                            (2, 3, [1, 1, 0])])
def test_legacy_sizes_cut_pieces_of_ceil_b_over_n(b, n, expected):
    assert legacy_sizes(b, n) == expected


def test_balanced_rebatch_streams_across_input_batches():
    node = BalancedRebatch(Dataset.range(10).batch(4)._node, 4, 1, 3, 0)
    assert [x.tolist() for x in Dataset(node)] == [[0, 1], [2], [3], [4, 5], [6], [7], [8, 9]]


# ------------------------------------------------------------------ the split on 2 and 3 replicas
def test_off_policy_uses_the_balanced_split_with_empty_trailing_replicas(s2, s3):
    ds = off(Dataset.range(10).batch(4))
    assert steps(s3, ds) == [[[0, 1], [2], [3]], [[4, 5], [6], [7]], [[8, 9], [], []]]
    assert steps(s2, ds) == [[[0, 1], [2, 3]], [[4, 5], [6, 7]], [[8, 9], []]]


def test_auto_on_one_worker_without_files_uses_the_legacy_split(s2, s3):
    ds = Dataset.range(10).batch(4)
    assert steps(s3, ds) == [[[0, 1], [2, 3], []], [[4, 5], [6, 7], []], [[8], [9], []]]
    assert steps(s2, ds) == [[[0, 1], [2, 3]], [[4, 5], [6, 7]], [[8], [9]]]


def test_a_file_pipeline_keeps_the_balanced_split(s3, tmp_path):
    path = str(tmp_path / "r.tfrecord")
    with TFRecordWriter(path) as w:
        for i in range(10):
            w.write(bytes([i]))
    ds = TFRecordDataset(path).batch(4).map(lambda b: np.frombuffer(b"".join(b), np.uint8).astype(np.int64))
    assert steps(s3, ds) == [[[0, 1], [2], [3]], [[4, 5], [6], [7]], [[8, 9], [], []]]


def test_split_balanced_option_always_balances(s3):
    ds = Dataset.range(10).batch(4)
    assert steps(s3, ds, jd.InputOptions(split="balanced")) == [[[0, 1], [2], [3]], [[4, 5], [6], [7]],
                                                                 [[8, 9], [], []]]


def test_tiny_dataset_gives_one_step_with_empty_replicas(s3):
    assert steps(s3, off(Dataset.range(1).batch(4))) == [[[0], [], []]]


def test_unbatched_scalars_are_a_clear_error(s3):
    with pytest.raises(ValueError, match="call batch"):
        s3.experimental_distribute_dataset(Dataset.range(4))


def batches_of_unknown_size():
    return Dataset.range(1).flat_map(lambda _: Dataset.range(8).batch(4))  # no batch size found statically


def test_unknown_batch_size_uses_the_legacy_split(s3):
    assert steps(s3, off(batches_of_unknown_size())) == [[[0, 1], [2, 3], []], [[4, 5], [6, 7], []]]


def test_the_nearest_batch_upstream_gives_the_batch_size(s3):
    ds = off(Dataset.range(8).batch(4).filter(lambda b: True))
    assert steps(s3, ds) == [[[0, 1], [2], [3]], [[4, 5], [6], [7]]]


def test_element_spec_is_static_only_when_every_replica_size_is(s2, s3):
    even = s2.experimental_distribute_dataset(off(Dataset.range(8).batch(4, drop_remainder=True)))
    assert even.element_spec.shape == (2,)
    assert s3.experimental_distribute_dataset(off(Dataset.range(8).batch(4))).element_spec.shape == (None,)


def test_batches_arrive_as_arrays_sharded_over_the_replicas(s2):
    step = next(iter(s2.experimental_distribute_dataset(off(Dataset.range(8).batch(4)))))
    arr = step.arrays
    assert isinstance(arr, jax.Array) and arr.shape == (4,)
    assert arr.sharding.spec == jax.sharding.PartitionSpec("replica")
    assert [d.id for d in arr.sharding.device_set] == [0, 1] or {d.id for d in arr.sharding.device_set} == {0, 1}


def test_fetch_to_device_false_keeps_host_batches(s2):
    dd = s2.experimental_distribute_dataset(off(Dataset.range(8).batch(4)),
                                            jd.InputOptions(experimental_fetch_to_device=False))
    step = next(iter(dd))
    assert isinstance(step.arrays, np.ndarray)
    assert [v.tolist() for v in s2.experimental_local_results(step)] == [[0, 1], [2, 3]]


# ------------------------------------------------------------------ ragged steps in run
def test_ragged_step_pads_and_exposes_the_true_sizes_in_run(s3):
    ds = off(Dataset.from_tensor_slices(np.arange(1, 11, dtype=np.float32)).batch(4))
    last = list(s3.experimental_distribute_dataset(ds))[-1]  # [9, 10], [], []
    assert last.sizes.tolist() == [2, 0, 0]

    def fn(x):
        ctx = jd.get_replica_context()
        return ctx.all_reduce("SUM", (x * ctx.example_mask(x.shape[0])).sum()), ctx.num_examples

    total, n = s3.run(fn, args=(last,))
    assert float(s3.experimental_local_results(total)[1]) == 19.0
    assert [int(v) for v in s3.experimental_local_results(n)] == [2, 0, 0]
    assert float(s3.reduce("MEAN", last, axis=0)) == 9.5


def test_every_batch_is_used_once_over_an_epoch(s3):
    ds = Dataset.range(23).batch(5)
    seen = sorted(x for step in steps(s3, ds) for part in step for x in part)
    assert seen == list(range(23))


# ------------------------------------------------------------------ distribute_datasets_from_function
def test_from_function_takes_per_replica_batches_without_rebatching(s3):
    contexts = []

    def fn(ctx):
        contexts.append((ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync))
        return Dataset.range(7).batch(2)

    dd = s3.distribute_datasets_from_function(fn)
    got = [[np.asarray(v).tolist() for v in s3.experimental_local_results(s)] for s in dd]
    assert contexts == [(1, 0, 3)]
    assert got == [[[0, 1], [2, 3], [4, 5]], [[6], [], []]]


def test_old_name_of_from_function_still_works(s2):
    dd = s2.experimental_distribute_datasets_from_function(lambda ctx: Dataset.range(4).batch(1))
    assert len(list(dd)) == 2


def test_per_replica_mode_gives_each_replica_its_own_copy(s2):
    dd = s2.distribute_datasets_from_function(
        lambda ctx: Dataset.range(4).batch(2),
        jd.InputOptions(experimental_replication_mode=jd.InputReplicationMode.PER_REPLICA))
    got = [[np.asarray(v).tolist() for v in s2.experimental_local_results(s)] for s in dd]
    assert got == [[[0, 1], [0, 1]], [[2, 3], [2, 3]]]


def test_dataset_fn_returning_a_non_dataset_is_a_type_error(s2):
    with pytest.raises(TypeError, match="must return a Dataset, got list"):
        s2.distribute_datasets_from_function(lambda ctx: [1, 2])


def test_input_context_defaults_and_per_replica_batch_size():
    ctx = jd.InputContext()
    assert (ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync) == (1, 0, 1)
    assert jd.InputContext(1, 0, 4).get_per_replica_batch_size(8) == 2
    with pytest.raises(ValueError, match="The `global_batch_size` 10 is not divisible by `num_replicas_in_sync` 4"):
        jd.InputContext(1, 0, 4).get_per_replica_batch_size(10)


# ------------------------------------------------------------------ iterator protocol and state
def test_get_next_raises_out_of_range_and_optional_is_empty_at_the_end(s2):
    from jaxfeed.pipeline.errors import OutOfRangeError

    it = iter(s2.experimental_distribute_dataset(off(Dataset.range(4).batch(4))))
    it.get_next()
    assert not it.get_next_as_optional().has_value()
    with pytest.raises(OutOfRangeError):
        it.get_next()


@pytest.mark.parametrize("buffer", [0, 2])
def test_state_restores_exactly_at_every_step_despite_device_prefetch(s3, buffer):
    ds = Dataset.range(40).shuffle(40, seed=3).batch(4)
    options = jd.InputOptions(experimental_per_replica_buffer_size=buffer)
    dd = s3.experimental_distribute_dataset(ds, options)

    def rows(step):
        return [np.asarray(v).tolist() for v in s3.experimental_local_results(step)]

    full = [rows(s) for s in dd]
    for k in range(len(full) + 1):
        it = iter(s3.experimental_distribute_dataset(ds, options))  # epoch 0 again
        for _ in range(k):
            next(it)
        state = it.get_state()
        it.close()
        fresh = iter(s3.experimental_distribute_dataset(ds, options))
        fresh.set_state(state)
        assert [rows(s) for s in fresh] == full[k:]


def test_state_has_the_documented_shape(s2):
    it = iter(s2.experimental_distribute_dataset(Dataset.range(8).batch(2)))
    next(it)
    state = it.get_state()
    assert set(state) >= {"version", "workers", "buffered", "step"}
    assert state["step"] == 1 and len(state["workers"]) == 1


def test_errors_in_the_pipeline_reach_the_caller_at_their_step(s2):
    def boom(x):
        if x == 5:
            raise ValueError("bad element 5")
        return x

    it = iter(s2.experimental_distribute_dataset(off(Dataset.range(8).map(boom).batch(2))))
    next(it), next(it)
    with pytest.raises(ValueError, match="bad element 5"):
        next(it)


# ------------------------------------------------------------------ what one worker of several reads (no processes)
def _worker_view(workers, replicas_per_worker, index):
    """Stands in for a multi-worker strategy: only what building a distributed dataset asks for."""
    return jd.InputFeed.layout(workers * replicas_per_worker, workers, index)


def worker_pieces(ds, workers, replicas_per_worker, index, options=None):
    dd = jd.DistributedDataset.from_dataset(_worker_view(workers, replicas_per_worker, index), ds, options)
    return [np.asarray(x).tolist() for x in dd._datasets[0]]


def test_file_sharded_workers_use_the_rotated_balanced_split(tmp_path):
    paths = []
    for f in range(2):
        paths.append(str(tmp_path / f"f{f}.tfrecord"))
        with TFRecordWriter(paths[-1]) as w:
            for i in range(7):
                w.write(bytes([10 * f + i]))
    ds = TFRecordDataset(paths).batch(7).map(lambda b: np.frombuffer(b"".join(b), np.uint8).astype(np.int64))
    # B=7 over 2 workers x 2 replicas: worker 0 cuts its batches [2,2,2,1], worker 1 [2,1,2,2] (rotated by R)
    assert [len(p) for p in worker_pieces(ds, 2, 2, 0)] == [2, 2, 2, 1]
    assert worker_pieces(ds, 2, 2, 1) == [[10, 11], [12], [13, 14], [15, 16]]


def test_data_sharded_workers_use_the_legacy_split_then_alternate_pieces():
    ds = Dataset.range(12).batch(6)
    assert worker_pieces(ds, 2, 2, 0) == [[0, 1], [4, 5], [6, 7], [10, 11]]
    assert worker_pieces(ds, 2, 2, 1) == [[2, 3], [], [8, 9], []]


def test_workers_together_read_every_element_once():
    ds = Dataset.range(50).batch(8)
    everything = sorted(x for w in range(3) for p in worker_pieces(ds, 3, 2, w) for x in p)
    assert everything == list(range(50))


def test_reduce_across_replicas_of_uneven_batches_without_an_axis_is_an_error(s3):
    step = next(iter(s3.experimental_distribute_dataset(off(Dataset.range(4).batch(4)))))  # [0,1],[2],[3]
    with pytest.raises(ValueError, match=r"different shapes \[\(2,\), \(1,\), \(1,\)\]"):
        s3.reduce("SUM", step, axis=None)


def test_always_balanced_needs_a_static_batch_size(s3):
    ds = batches_of_unknown_size()
    with pytest.raises(ValueError, match=r"split='balanced'\) needs a global batch size known statically"):
        s3.experimental_distribute_dataset(ds, jd.InputOptions(split="balanced"))


def test_explain_says_which_policy_and_split_this_worker_runs(s3):
    text = s3.experimental_distribute_dataset(Dataset.range(8).batch(4)).explain()
    assert "policy DATA (requested AUTO)" in text and "unshardable source" in text
    assert "LegacyRebatch(num_replicas=3)" in text and "Shard(num_shards=1, index=0" in text


# ------------------------------------------------------------------ determinism: stateful pipelines
_SHARED = [0]  # state shared by the pipeline's map and the training loop


def _count(x):
    _SHARED[0] += 1
    return x * 1000 + _SHARED[0]


def test_stateful_pipeline_under_determinism_is_read_on_the_consumers_thread_without_prefetch(s2, caplog):
    import logging
    import threading
    import warnings

    from jaxfeed import determinism

    def run(distributed):
        ds = Dataset.range(12).map(_count).batch(4)
        out = []
        if distributed:
            it = iter(s2.experimental_distribute_dataset(ds))
            _SHARED[0] = 0  # (building the graph may trace the function for its element spec)
            for step in it:
                out.append(np.concatenate([np.asarray(v) for v in s2.experimental_local_results(step)]).tolist())
                assert it._thread is None
                assert not any(t.name == "jaxfeed-distribute-prefetch" for t in threading.enumerate())
                _SHARED[0] += 100  # the training loop touches the same state between steps
            return out, it
        it = iter(ds)
        _SHARED[0] = 0
        for batch in it:  # the plain single-threaded run
            out.append(np.asarray(batch).tolist())
            _SHARED[0] += 100
        return out, None

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DeterminismWarning: the CPU backend has started already
        determinism.enable_op_determinism()
    try:
        with caplog.at_level(logging.INFO, logger="jaxfeed.determinism"):
            got, it = run(True)
        expected, _ = run(False)
    finally:
        determinism.disable_op_determinism()
    assert got == expected
    assert expected[1][0] == 4 * 1000 + 100 + 5  # the loop's +100 came before the second step's map calls
    assert "Map" in it.synchronous_reason and "_count" in it.synchronous_reason
    assert any("no prefetch thread" in r.getMessage() and "Map" in r.getMessage() for r in caplog.records)
    # determinism off: the prefetch thread is back
    it2 = iter(s2.experimental_distribute_dataset(Dataset.range(12).map(_count).batch(4)))
    next(it2)
    assert it2.synchronous_reason is None and it2._thread is not None
    it2.close()


# ------------------------------------------------------------------ elastic resume (W workers -> W' workers)
class _SimulatedWorker(jd.MirroredStrategy):
    """Worker ``index`` of ``workers``, each with these local devices: one process plays them in turn."""

    def __init__(self, devices, workers, index):
        super().__init__(devices)
        self._sim = (workers, index)

    @property
    def num_replicas_in_sync(self):
        return len(self._devices) * getattr(self, "_sim", (1, 0))[0]

    def _input_workers(self):
        return getattr(self, "_sim", (1, 0))


def _rows(step, local_replicas):
    """The rows of one step, replica after replica (padding removed)."""
    arr = np.asarray(step._leaves[0]).reshape(local_replicas, -1)
    sizes = step.sizes if step.sizes is not None else [arr.shape[1]] * local_replicas
    return [x for r in range(local_replicas) for x in arr[r, :int(sizes[r])].tolist()]


def _data_sharded(ds):
    o = Options()
    o.experimental_distribute.auto_shard_policy = AutoShardPolicy.DATA
    return ds.with_options(o)


def _elastic_global_dataset():
    return _data_sharded(Dataset.range(150).shuffle(40, seed=11).map(lambda x: x * 10).batch(16))


@pytest.mark.parametrize("k", [0, 3, 10])
def test_states_of_two_workers_restore_elastically_on_one_worker_with_exactly_the_unconsumed_batches(k):
    from jaxfeed.pipeline import checkpoint

    every_row = [x for b in _elastic_global_dataset() for x in np.asarray(b).tolist()]
    consumed, states = [], []
    for i in range(2):  # 2 workers x 2 replicas: each step, the 4 pieces of one global batch
        w = _SimulatedWorker(["cpu:0", "cpu:1"], 2, i)
        it = iter(w.experimental_distribute_dataset(_elastic_global_dataset()))
        for _ in range(k):
            consumed.extend(_rows(next(it), 2))
        states.append(checkpoint.serialize(it.get_state()))  # with steps read ahead in the buffer
        it.close()
    s3 = strategy(3)  # the new job: 1 worker x 3 replicas (other piece sizes)
    restored = s3.experimental_distribute_dataset(_elastic_global_dataset()).restore_elastic(states)
    rest = [x for step in restored for x in _rows(step, 3)]
    assert sorted(consumed + rest) == sorted(every_row)  # every element exactly once
    assert rest == every_row[16 * k:]  # in the global order, from the first unconsumed batch


def test_elastic_resume_can_be_resumed_elastically_again():
    every_row = [x for b in _elastic_global_dataset() for x in np.asarray(b).tolist()]
    states, head, got = [], [], []
    for i in range(2):
        it = iter(_SimulatedWorker(["cpu:0", "cpu:1"], 2, i).experimental_distribute_dataset(_elastic_global_dataset()))
        head.extend(x for _ in range(2) for x in _rows(next(it), 2))
        states.append(it.get_state())
    assert sorted(head) == sorted(every_row[:32])  # two steps of two workers: the first two global batches
    s3 = strategy(3)
    it = s3.experimental_distribute_dataset(_elastic_global_dataset()).restore_elastic(states)
    got.extend(x for _ in range(3) for x in _rows(next(it), 3))
    again = [it.get_state()]
    s2 = strategy(2)
    it2 = s2.experimental_distribute_dataset(_elastic_global_dataset()).restore_elastic(again)
    got.extend(x for step in it2 for x in _rows(step, 2))
    assert got == every_row[32:]  # 3 batches on one worker of 3 replicas, then the rest on 2 replicas


def test_elastic_restore_refuses_states_at_different_steps_and_unsupported_pipelines(s2):
    from jaxfeed.pipeline.errors import FailedPreconditionError

    def saved(steps):
        states = []
        for i, k in enumerate(steps):
            it = iter(_SimulatedWorker(["cpu:0"], 2, i).experimental_distribute_dataset(_elastic_global_dataset()))
            for _ in range(k):
                next(it)
            states.append(it.get_state())
        return states

    dds = s2.experimental_distribute_dataset(_elastic_global_dataset())
    with pytest.raises(FailedPreconditionError, match="different steps"):
        dds.restore_elastic(saved([1, 2]))
    states = saved([1, 1])
    with pytest.raises(FailedPreconditionError, match="state 0 was saved by worker 1 of 2"):
        dds.restore_elastic(states[::-1])
    other = _data_sharded(Dataset.range(150).shuffle(40, seed=12).map(lambda x: x * 10).batch(16))
    with pytest.raises(FailedPreconditionError, match="not from this pipeline"):
        s2.experimental_distribute_dataset(other).restore_elastic(states)
    unseeded = _data_sharded(Dataset.range(40).shuffle(10).batch(4))
    with pytest.raises(FailedPreconditionError, match="Shuffle.*random and unseeded"):
        s2.experimental_distribute_dataset(unseeded).restore_elastic(states)
    with pytest.raises(FailedPreconditionError, match="needs DATA auto-sharding"):
        s2.experimental_distribute_dataset(off(Dataset.range(40).batch(4))).restore_elastic(states)


def test_an_error_the_thread_read_ahead_is_kept_in_the_saved_state_and_raised_at_its_step():
    # the prefetch thread made steps past a failing one; a state saved before that step is delivered must
    # raise the error at its step after a restore (it used to be dropped from the state: the restored run went
    # on as if the bad rows had never been there)
    import time

    from jaxfeed.pipeline import checkpoint

    def bad_row_40(x):
        if x == 40:
            raise ValueError("bad row 40")
        return x

    s2 = strategy(2)
    dds = s2.experimental_distribute_dataset(Dataset.range(160).map(bad_row_40).batch(16),
                                             jd.InputOptions(experimental_per_replica_buffer_size=8))
    it = iter(dds)
    assert np.asarray(next(it).arrays).tolist() == list(range(16))
    deadline = time.monotonic() + 30  # a hang guard: wait until the thread has read past the failing step
    while len(it._queue._items) < 2:  # step 1 and the error (the thread stops at an error)
        assert time.monotonic() < deadline
        time.sleep(0.001)
    state = checkpoint.deserialize(checkpoint.serialize(it.get_state()))
    it.close()
    rest = iter(dds)
    rest.set_state(state)
    assert np.asarray(next(rest).arrays).tolist() == list(range(16, 32))
    with pytest.raises(ValueError, match="bad row 40"):
        next(rest)


@pytest.mark.parametrize("restore", [False, True])
def test_a_halt_while_a_peer_has_not_reported_the_step_keeps_the_step(s2, monkeypatch, restore):
    # multi-worker get_state: the producer thread waits for a peer's report of a step the peer, halted for its
    # own get_state, never makes. The wait used to ignore the halt: get_state hung until the step timeout
    # (300 s) and saved the TimeoutError (a multi-process test failed ~1 run in 10 that way). Now the halt
    # ends the wait and the step's pieces, read from the pipeline already, are kept: made again when the
    # iterator goes on, or after a restore.
    import threading

    from jaxfeed.distribute import lifetime

    o = Options()
    o.autotune.enabled = False  # the producer thread always (no on-demand steps on the consumer's thread)
    ds = Dataset.range(48).map(lambda x: {"b": x, "a": (x * 2, x % 3)}).batch(4).with_options(o)
    options = jd.InputOptions(experimental_per_replica_buffer_size=1)
    dd = s2.experimental_distribute_dataset(ds, options)

    def rows(step):
        return [jax.tree_util.tree_map(lambda v: np.asarray(v).tolist(), r)
                for r in s2.experimental_local_results(step)]

    full = [rows(s) for s in s2.experimental_distribute_dataset(ds, options)]
    feed = dd._feed
    agree, waiting = feed._agree, threading.Event()

    def peer_never_reports(uid, generation, step, sizes, stop=None, reported=False):
        if stop is not None and step == 2 and not reported:  # the producer thread, at its third step
            waiting.set()
            assert stop.wait(30)
            raise lifetime.StepAbandoned("halted")
        return agree(uid, generation, step, sizes, stop=stop, reported=reported)

    monkeypatch.setattr(feed, "_agree", peer_never_reports)
    it = iter(dd)
    got = [rows(next(it))]
    assert waiting.wait(30)  # the producer waits at its third step (the second is read ahead)
    state = it.get_state()  # returns: the halt ends the wait
    assert state["unagreed"] is not None and state["step"] == 1
    if restore:  # (through the checkpoint format: the kept pieces' structure survives it)
        from jaxfeed.pipeline import checkpoint

        state = checkpoint.deserialize(checkpoint.serialize(state))
        it.close()
        it = iter(s2.experimental_distribute_dataset(ds, options))
        it.set_state(state)
    got += [rows(s) for s in it]
    assert got == full
