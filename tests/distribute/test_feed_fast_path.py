"""The distributed feed's per-step work (issue 19, "Feed to devices"): a step's numeric components are placed
on the devices by one call of the strategy, a dense step is joined without the padding walk, and the legacy
rebatch cuts a step's pieces in one go -- with the same values, sizes, specs and states as before."""

import numpy as np
import pytest

from jaxfeed import distribute as jd
from jaxfeed.distribute.rebatch import LegacyRebatch
from jaxfeed.pipeline import AutoShardPolicy, Dataset, Options


def strategy(n):
    return jd.MirroredStrategy([f"cpu:{i}" for i in range(n)])


@pytest.fixture(scope="module")
def s4():
    return strategy(4)


def off(ds):
    o = Options()
    o.experimental_distribute.auto_shard_policy = AutoShardPolicy.OFF
    return ds.with_options(o)


def _three_components(n):
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    return Dataset.from_tensor_slices({"x": x, "y": np.arange(n, dtype=np.int32), "w": x[:, 0] * 2})


def test_a_steps_numeric_components_are_placed_by_one_call(s4, monkeypatch):
    calls = []
    original = type(s4)._per_replica_from_local

    def counting(self, local_stacks, *args, **kwargs):
        calls.append(len(local_stacks))
        return original(self, local_stacks, *args, **kwargs)

    monkeypatch.setattr(type(s4), "_per_replica_from_local", counting)
    dist = s4.experimental_distribute_dataset(_three_components(32).batch(8),
                                              jd.InputOptions(experimental_per_replica_buffer_size=0))
    steps = list(dist)
    assert len(steps) == 4
    assert calls == [3] * 4  # one placement per step, holding the step's three components
    for k, step in enumerate(steps):
        assert sorted(step) == ["w", "x", "y"]
        assert np.asarray(step["y"].arrays).tolist() == list(range(8 * k, 8 * k + 8))
        assert np.asarray(step["x"].arrays).dtype == np.float32
        assert step["x"].sizes is None  # a dense step


def test_dense_and_ragged_steps_keep_their_values_and_sizes(s4):
    # 10 rows in batches of 8, balanced split (policy OFF): a dense step (2 rows per replica), then the last
    # 2 rows go to the first replica (a ragged step)
    dist = s4.experimental_distribute_dataset(off(_three_components(10).batch(8)))
    first, last = list(dist)
    assert [np.asarray(v).tolist() for v in s4.experimental_local_results(first["y"])] == \
        [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert first["y"].sizes is None
    assert last["y"].sizes.tolist() == [2, 0, 0, 0]
    assert [np.asarray(v).tolist() for v in s4.experimental_local_results(last["y"])] == [[8, 9], [], [], []]
    assert last["x"].sizes.tolist() == [2, 0, 0, 0]
    assert np.asarray(last["y"].arrays).shape == (8,)  # padded to the static capacity (8 / 4 rows each)


def test_strings_stay_on_the_host_next_to_placed_components(s4):
    ds = Dataset.from_tensor_slices({"s": np.array([b"a", b"b", b"c", b"d"], dtype=object),
                                     "v": np.arange(4, dtype=np.float32)}).batch(4)
    (step,) = list(s4.experimental_distribute_dataset(ds))
    assert step["s"].host and not step["v"].host
    assert [v.tolist() for v in s4.experimental_local_results(step["s"])] == [[b"a"], [b"b"], [b"c"], [b"d"]]
    assert np.asarray(step["v"].arrays).tolist() == [0.0, 1.0, 2.0, 3.0]


def test_dense_host_steps_are_fresh_arrays(s4):
    # experimental_fetch_to_device=False: the host values the user gets are the step's own arrays
    x = np.arange(8, dtype=np.float32)
    ds = Dataset.from_tensor_slices(x).batch(8)
    (step,) = list(s4.experimental_distribute_dataset(
        ds, jd.InputOptions(experimental_fetch_to_device=False)))
    leaf = step._leaves[0]
    assert not np.shares_memory(leaf, x)
    assert leaf.flags.writeable


@pytest.mark.parametrize("k", [1, 2, 3, 5, 7])
def test_legacy_rebatch_cuts_the_same_pieces_many_at_a_time(k):
    # 7-row batches into 3 pieces (3, 3, 1), and a 2-row last batch (1, 1, 0); a nested element
    rows = {"a": np.arange(16, dtype=np.int64), "b": (np.arange(16, dtype=np.float32) * 2,)}
    node = LegacyRebatch(Dataset.from_tensor_slices(rows).batch(7)._node, 3)

    def flat(piece):
        return (piece["a"].tolist(), piece["b"][0].tolist())

    one_by_one = [flat(p) for p in Dataset(node)]
    it = iter(Dataset(node))
    many = []
    while True:
        got = it.next_many(k)
        if not got:
            break
        assert len(got) <= k
        many.extend(flat(p) for p in got)
    assert many == one_by_one
    assert [len(a) for a, _ in many] == [3, 3, 1, 3, 3, 1, 1, 1, 0]


def test_legacy_rebatch_state_in_the_middle_of_a_batch_after_next_many():
    node = LegacyRebatch(Dataset.range(12).batch(6)._node, 3)
    expected = [p.tolist() for p in Dataset(node)]
    it = iter(Dataset(node))
    head = [p.tolist() for p in it.next_many(4)]  # a whole batch's three pieces and one of the next
    state = it.get_state()
    rest = [p.tolist() for p in it]
    it2 = iter(Dataset(node))
    it2.set_state(state)
    assert head + [p.tolist() for p in it2] == expected == head + rest


def test_legacy_rebatch_delivers_pieces_before_an_error_then_the_error():
    def boom(x):
        if x >= 6:
            raise ValueError("boom")
        return x

    from jaxfeed.pipeline.errors import InvalidArgumentError

    ds = Dataset.range(12).map(lambda x: np.int64(boom(int(x)))).batch(3)
    it = iter(Dataset(LegacyRebatch(ds._node, 3)))
    got = it.next_many(10)
    assert [p.tolist() for p in got] == [[0], [1], [2], [3], [4], [5]]
    with pytest.raises((ValueError, InvalidArgumentError)):
        it.next_many(10)


def test_distributed_state_round_trip_over_dense_steps(s4):
    ds = off(_three_components(40).batch(8))
    dist = s4.experimental_distribute_dataset(ds)
    it = iter(dist)
    first = next(it)
    state = it.get_state()
    rest = [np.asarray(step["y"].arrays).tolist() for step in it]
    it2 = iter(dist)
    it2.set_state(state)
    assert [np.asarray(step["y"].arrays).tolist() for step in it2] == rest
    assert np.asarray(first["y"].arrays).tolist() == list(range(8))
    assert len(rest) == 4


def test_steps_the_user_dropped_are_freed_by_the_prefetch_thread_not_in_next(s4):
    # freeing a step's per-device buffers costs tens of microseconds: with the prefetch thread running, the
    # iterator holds the last delivered steps and that thread drops them, off the training loop's path
    import threading
    import time
    import weakref

    dist = s4.experimental_distribute_dataset(_three_components(400).batch(8))
    it = iter(dist)
    freed_on = []
    first = next(it)
    weakref.finalize(first["y"], lambda: freed_on.append(threading.current_thread().name))
    del first
    assert freed_on == []  # still held by the iterator
    later = [np.asarray(next(it)["y"].arrays).tolist() for _ in range(6)]
    deadline = time.monotonic() + 30  # a hang guard, not a speed check
    while not freed_on and time.monotonic() < deadline:
        time.sleep(0.01)
    assert freed_on == ["jaxfeed-distribute-prefetch"]
    assert later[0] == list(range(8, 16))
    it.close()


def test_without_the_prefetch_thread_the_iterator_holds_no_delivered_step(s4):
    import weakref

    dist = s4.experimental_distribute_dataset(_three_components(64).batch(8),
                                              jd.InputOptions(experimental_per_replica_buffer_size=0))
    it = iter(dist)
    first = next(it)
    ref = weakref.ref(first["y"])
    del first
    assert ref() is None


def test_large_dense_steps_reach_the_devices_with_the_pipelines_values(s4):
    rows = np.random.default_rng(0).normal(size=(4096 * 3, 32)).astype(np.float32)
    dist = s4.experimental_distribute_dataset(Dataset.from_tensor_slices(rows).batch(4096))
    got = [np.asarray(step.arrays) for step in dist]
    assert len(got) == 3
    assert all(np.array_equal(g, rows[k * 4096:(k + 1) * 4096]) for k, g in enumerate(got))
