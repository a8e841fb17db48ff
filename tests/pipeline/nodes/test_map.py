"""map, sequential and thread-parallel (docs/tf-behaviour.md#map)."""

import numpy as np
import pytest

from jaxfeed.pipeline import AUTOTUNE, Dataset, errors

from node_test_helpers import values


# ---------------------------------------------------------------------------------------------- map
def test_map_spreads_tuples_and_passes_dicts_whole():
    ds = Dataset.from_tensor_slices((np.arange(3), np.arange(3) * 10))
    assert values(ds.map(lambda a, b: a + b)) == [0, 11, 22]
    ds = Dataset.from_tensor_slices({"a": np.arange(3)})
    assert values(ds.map(lambda d: d["a"] * 2)) == [0, 2, 4]


def test_map_with_wrong_arity_fails_at_construction():
    ds = Dataset.from_tensor_slices((np.arange(3), np.arange(3)))
    with pytest.raises(TypeError, match="positional"):
        ds.map(lambda x: x)


def test_map_list_result_becomes_tuple_and_python_scalars_follow_tf():
    out = list(Dataset.range(2).map(lambda x: [x, 1, 2.5]))
    assert isinstance(out[0], tuple) and out[0][1].dtype == np.int32 and out[0][2].dtype == np.float32


def test_map_error_surfaces_after_earlier_elements_with_a_note():
    def f(x):
        if x == 2:
            raise ValueError("boom")
        return x

    it = iter(Dataset.range(4).map(f))
    assert [int(next(it)), int(next(it))] == [0, 1]
    with pytest.raises(ValueError, match="boom") as info:
        next(it)
    assert any("Map" in n for n in getattr(info.value, "__notes__", []))
    assert int(next(it)) == 3  # the iterator goes on after the failed element


@pytest.mark.parametrize("npc", [1, 2, 4, AUTOTUNE])
def test_parallel_map_keeps_order(npc):
    import time

    def slow_first(x):
        if x == 0:
            time.sleep(0.05)
        return x * 2

    assert values(Dataset.range(50).map(slow_first, num_parallel_calls=npc)) == [2 * i for i in range(50)]


def test_parallel_map_nondeterministic_keeps_the_multiset():
    import time

    def slow_first(x):
        if x == 0:
            time.sleep(0.2)
        return x

    out = values(Dataset.range(40).map(slow_first, num_parallel_calls=4, deterministic=False))
    assert sorted(out) == list(range(40))


def test_parallel_map_really_runs_concurrently():
    import threading
    import time

    active, peak, lock = [0], [0], threading.Lock()

    def f(x):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.01)
        with lock:
            active[0] -= 1
        return x

    list(Dataset.range(32).map(f, num_parallel_calls=4))
    assert peak[0] >= 2


def test_parallel_map_error_in_order():
    def f(x):
        if x == 5:
            raise KeyError("bad")
        return x

    it = iter(Dataset.range(10).map(f, num_parallel_calls=3))
    assert [int(next(it)) for _ in range(5)] == [0, 1, 2, 3, 4]
    with pytest.raises(KeyError):
        next(it)


def test_num_parallel_calls_must_be_positive():
    with pytest.raises(errors.InvalidArgumentError):
        Dataset.range(3).map(lambda x: x, num_parallel_calls=0)


def test_deterministic_without_parallelism_warns():
    with pytest.warns(UserWarning, match="no effect"):
        Dataset.range(3).map(lambda x: x, deterministic=False)
