"""tf.data semantics of the core sources and transformations (see docs/tf-behaviour.md)."""

import collections
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxfeed.pipeline import AUTOTUNE, Dataset, Options, TensorSpec, errors
from jaxfeed.pipeline.dataset import INFINITE_CARDINALITY, UNKNOWN_CARDINALITY
from jaxfeed.pipeline.testing import assert_resumes_everywhere, assert_same_after_rewrites


def values(ds):
    return [np.asarray(x).tolist() for x in ds]


# ---------------------------------------------------------------------------------------------- range
@pytest.mark.parametrize("args", [(5,), (2, 5), (2, 10, 3), (10, 2, -2), (5, 2), (0,)])
def test_range_follows_python_range(args):
    assert values(Dataset.range(*args)) == list(range(*args))
    assert Dataset.range(*args).cardinality() == len(range(*args))


def test_range_is_int64_and_output_type_may_be_float():
    assert Dataset.range(3).element_spec == TensorSpec((), np.int64)
    out = list(Dataset.range(3, output_type=np.float32))
    assert [x.dtype for x in out] == [np.float32] * 3 and values(out) == [0.0, 1.0, 2.0]


def test_range_rejects_bad_arguments():
    with pytest.raises(ValueError):
        Dataset.range()
    with pytest.raises(TypeError):
        Dataset.range(1.5)
    with pytest.raises(errors.InvalidArgumentError, match="step must be a non-zero"):
        Dataset.range(0, 5, 0)


# ------------------------------------------------------------------------------------- tensor slices
def test_from_tensor_slices_python_list_is_one_int32_tensor():
    ds = Dataset.from_tensor_slices([[1, 2], [3, 4]])
    assert ds.element_spec == TensorSpec((2,), np.int32)
    assert values(ds) == [[1, 2], [3, 4]]


def test_from_tensor_slices_nested_structures_keep_their_shape():
    Point = collections.namedtuple("Point", "x y")
    ds = Dataset.from_tensor_slices({"b": np.arange(3), "a": (np.ones((3, 2)), Point(np.zeros(3), [1.0, 2, 3]))})
    first = next(iter(ds))
    assert list(first) == ["b", "a"]  # key order as given
    assert isinstance(first["a"][1], Point) and first["a"][1].y.dtype == np.float32


def test_from_tensor_slices_leading_dims_must_agree():
    with pytest.raises(ValueError, match="Dimensions 3 and 2 are not compatible"):
        Dataset.from_tensor_slices((np.arange(3), np.arange(2)))
    with pytest.raises(ValueError):
        Dataset.from_tensor_slices(np.int64(3))
    with pytest.raises(ValueError):
        Dataset.from_tensor_slices(None)


def test_from_tensor_slices_empty_keeps_trailing_shape():
    ds = Dataset.from_tensor_slices(np.zeros((0, 3)))
    assert list(ds) == [] and ds.element_spec == TensorSpec((3,), np.float64)


def test_strings_come_back_as_bytes():
    ds = Dataset.from_tensor_slices(["a", "bc"])
    assert list(ds) == [b"a", b"bc"]
    batch = next(iter(ds.batch(2)))
    assert batch.dtype == object and batch.tolist() == [b"a", b"bc"]



def test_batched_records_stay_whole_bytes_objects():
    # records batch into an object array of the very bytes (NULs, empties kept: no fixed-width 'S' dtype)
    records = [b"\x00a\x00", b"", b"x" * 3000, b"\x00"]
    batch = next(iter(Dataset.from_generator(lambda: iter(records), output_signature=TensorSpec((), object))
                      .batch(4)))
    assert batch.dtype == object and batch.shape == (4,) and batch.tolist() == records
    assert all(type(r) is bytes for r in batch) and batch.flags.writeable

def test_from_tensors_is_one_element():
    ds = Dataset.from_tensors((np.arange(3), "x"))
    (only,) = list(ds)
    assert only[1] == b"x" and ds.cardinality() == 1


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


# -------------------------------------------------------------------------------------------- batch
def test_batch_keeps_partial_batch_unless_dropped():
    assert values(Dataset.range(7).batch(3)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert values(Dataset.range(7).batch(3, drop_remainder=True)) == [[0, 1, 2], [3, 4, 5]]
    assert values(Dataset.range(2).batch(5)) == [[0, 1]]
    assert values(Dataset.range(2).batch(5, drop_remainder=True)) == []
    assert values(Dataset.range(0).batch(5)) == []


def test_batch_spec_and_cardinality():
    ds = Dataset.range(7).batch(3)
    assert ds.element_spec == TensorSpec((None,), np.int64) and ds.cardinality() == 3
    ds = Dataset.range(7).batch(3, drop_remainder=True)
    assert ds.element_spec == TensorSpec((3,), np.int64) and ds.cardinality() == 2
    assert Dataset.range(3).repeat().batch(2).cardinality() == INFINITE_CARDINALITY


def test_batch_size_must_be_positive():
    with pytest.raises(errors.InvalidArgumentError, match="greater than zero"):
        Dataset.range(3).batch(0)
    with pytest.raises(TypeError):
        Dataset.range(3).batch(2.0)


def test_batch_of_ragged_elements_fails_at_that_batch():
    ds = Dataset.range(4).map(lambda x: np.zeros(1 if x < 3 else 2)).batch(2)
    it = iter(ds)
    assert next(it).shape == (2, 1)
    with pytest.raises(errors.InvalidArgumentError, match="Cannot add tensor to the batch"):
        next(it)


def test_batch_nested_structures_and_parallel_batch():
    ds = Dataset.from_tensor_slices({"a": np.arange(6), "b": (np.arange(6.0), np.arange(6) * 2)})
    (first, *_) = list(ds.batch(4, num_parallel_calls=2))
    assert first["a"].tolist() == [0, 1, 2, 3] and first["b"][1].tolist() == [0, 2, 4, 6]


# -------------------------------------------------------------------------------- take, skip, repeat
def test_take_and_skip_counts():
    r = Dataset.range(5)
    assert values(r.take(2)) == [0, 1] and values(r.take(-1)) == list(range(5)) and values(r.take(0)) == []
    assert values(r.take(10)) == list(range(5))
    assert values(r.skip(2)) == [2, 3, 4] and values(r.skip(-1)) == [] and values(r.skip(9)) == []
    assert r.take(-5).cardinality() == 5  # tf.data says -5; we report the truth
    assert r.skip(-1).cardinality() == 0 and r.repeat().skip(-1).cardinality() == INFINITE_CARDINALITY


def test_repeat_counts_and_empty_forever_terminates():
    assert values(Dataset.range(2).repeat(3)) == [0, 1] * 3
    assert values(Dataset.range(2).repeat(0)) == []
    assert values(Dataset.range(0).repeat()) == []
    assert Dataset.range(0).repeat().cardinality() == 0
    assert values(Dataset.range(3).repeat().take(7)) == [0, 1, 2, 0, 1, 2, 0]
    assert Dataset.range(3).repeat().cardinality() == INFINITE_CARDINALITY
    assert values(Dataset.range(3).repeat(2).batch(4)) == [[0, 1, 2, 0], [1, 2]]


def test_len_raises_for_infinite_and_unknown():
    with pytest.raises(TypeError, match="infinite"):
        len(Dataset.range(3).repeat())
    assert len(Dataset.range(3)) == 3


# -------------------------------------------------------------------------------------------- shard
def test_shard_keeps_every_nth_from_index():
    assert values(Dataset.range(10).shard(3, 1)) == [1, 4, 7]
    assert values(Dataset.range(10).shard(20, 5)) == [5] and values(Dataset.range(10).shard(20, 15)) == []
    assert Dataset.range(10).shard(3, 1).cardinality() == 3
    assert values(Dataset.range(10).shard(2, 0).batch(2)) == [[0, 2], [4, 6], [8]]
    assert values(Dataset.range(10).batch(2).shard(2, 0)) == [[0, 1], [4, 5], [8, 9]]


def test_shard_validates_arguments():
    with pytest.raises(errors.InvalidArgumentError, match="Index must be between 0 and 1"):
        Dataset.range(3).shard(2, 2)
    with pytest.raises(errors.InvalidArgumentError, match="greater than zero"):
        Dataset.range(3).shard(0, 0)


def test_shard_hint_outside_distribution_fails_at_iteration():
    from jaxfeed.pipeline import SHARD_HINT

    ds = Dataset.range(3).shard(SHARD_HINT, SHARD_HINT)
    with pytest.raises(errors.FailedPreconditionError):
        list(ds)


# ------------------------------------------------------------------------------------------ shuffle
def test_shuffle_is_a_permutation_with_bounded_displacement():
    for seed in range(20):
        out = values(Dataset.range(50).shuffle(3, seed=seed))
        assert sorted(out) == list(range(50))
        assert all(v < k + 3 for k, v in enumerate(out))
    assert values(Dataset.range(10).shuffle(1, seed=3)) == list(range(10))


def test_shuffle_seeded_epochs_reproduce_and_differ():
    def epochs(reshuffle):
        ds = Dataset.range(20).shuffle(20, seed=7, reshuffle_each_iteration=reshuffle)
        return values(ds), values(ds)

    a1, a2 = epochs(True)
    b1, b2 = epochs(True)
    assert (a1, a2) == (b1, b2) and a1 != a2
    c1, c2 = epochs(False)
    assert c1 == c2


def test_shuffle_then_repeat_never_mixes_epochs():
    out = values(Dataset.range(10).shuffle(10, seed=1).repeat(2))
    assert sorted(out[:10]) == list(range(10)) and sorted(out[10:]) == list(range(10)) and out[:10] != out[10:]


def test_unseeded_shuffle_differs_between_runs():
    orders = {tuple(values(Dataset.range(30).shuffle(30))) for _ in range(3)}
    assert len(orders) > 1


def test_global_seed_alone_reproduces():
    from jaxfeed.pipeline import random_seed

    random_seed.set_global_seed(5)
    a = values(Dataset.range(30).shuffle(30))
    random_seed.set_global_seed(5)
    b = values(Dataset.range(30).shuffle(30))
    assert a == b


def test_shuffle_buffer_validation():
    with pytest.raises(errors.InvalidArgumentError):
        Dataset.range(3).shuffle(0)
    with pytest.raises(errors.InvalidArgumentError):
        Dataset.range(3).shuffle(-1)
    with pytest.raises(ValueError):
        Dataset.range(3).shuffle(None)
    assert sorted(values(Dataset.range(5).shuffle(UNKNOWN_CARDINALITY, seed=1))) == list(range(5))


def test_shuffle_over_index_stream_equals_shuffle_over_elements():
    x = np.arange(100)
    via_indices = values(Dataset.from_tensor_slices(x).shuffle(10, seed=3).batch(7))
    via_elements = values(Dataset.from_tensor_slices(x).map(lambda v: v).shuffle(10, seed=3).batch(7))
    assert via_indices == via_elements


# ----------------------------------------------------------------------------------------- prefetch
def test_prefetch_keeps_order_and_validates():
    assert values(Dataset.range(100).prefetch(5)) == list(range(100))
    assert values(Dataset.range(100).prefetch(AUTOTUNE).batch(7)) == values(Dataset.range(100).batch(7))
    assert values(Dataset.range(3).prefetch(0)) == [0, 1, 2]
    with pytest.raises(errors.InvalidArgumentError):
        Dataset.range(3).prefetch(-2)


def test_prefetch_delivers_errors_in_place():
    def f(x):
        if x == 3:
            raise RuntimeError("bad element")
        return x

    it = iter(Dataset.range(6).map(f).prefetch(4))
    assert [int(next(it)) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(RuntimeError, match="bad element"):
        next(it)
    assert [int(x) for x in it] == [4, 5]


def test_closing_an_iterator_stops_its_threads():
    import threading

    before = threading.active_count()
    it = iter(Dataset.range(10**6).map(lambda x: x, num_parallel_calls=2).prefetch(10))
    next(it)
    it.close()
    import time

    deadline = time.time() + 5
    while threading.active_count() > before and time.time() < deadline:
        time.sleep(0.01)
    assert threading.active_count() <= before


# ----------------------------------------------------------------------------------- options, graph
def test_options_are_typed_and_merge():
    o = Options()
    assert o.deterministic is None and o.experimental_distribute.auto_shard_policy == 0
    with pytest.raises(AttributeError, match="Cannot set the property bogus"):
        o.bogus = 1
    with pytest.raises(TypeError):
        o.deterministic = 1
    a, b = Options(), Options()
    a.deterministic = False
    b.experimental_optimization.map_fusion = False
    ds = Dataset.range(3).with_options(a).map(lambda x: x).with_options(b)
    assert ds.options().deterministic is False and ds.options().experimental_optimization.map_fusion is False
    assert Options() == Options()


def test_graph_prints_every_node_with_arguments():
    text = Dataset.range(10).map(lambda x: x).batch(4, drop_remainder=True).graph()
    assert "Batch(batch_size=4, drop_remainder=True)" in text and "Range(start=0, stop=10" in text
    assert "Map(" in text


def test_dataset_is_immutable_and_reiterable():
    base = Dataset.range(4)
    mapped = base.map(lambda x: x * 2)
    assert values(base) == [0, 1, 2, 3] and values(mapped) == [0, 2, 4, 6] and values(mapped) == [0, 2, 4, 6]


def test_rewrites_yield_what_the_plain_graph_yields():
    ds = Dataset.range(20).map(lambda x: x + 1).map(lambda x: (x, x * 2)).map(lambda a, b: a + b).take(-1).skip(0)
    assert_same_after_rewrites(ds.batch(3))
    text = ds.explain()
    assert "map_fusion" in text and "noop_elimination" in text


# --------------------------------------------------------------------------------------- iterators
def test_get_next_and_optional():
    it = iter(Dataset.range(1))
    assert it.get_next_as_optional().get_value() == 0
    assert not it.get_next_as_optional().has_value()
    with pytest.raises(errors.OutOfRangeError):
        it.get_next()
    with pytest.raises(StopIteration):
        next(it)


def test_get_single_element_and_reduce():
    assert Dataset.range(1).get_single_element() == 0
    with pytest.raises(errors.InvalidArgumentError, match="more than one"):
        Dataset.range(2).get_single_element()
    assert int(Dataset.range(5).reduce(np.int64(0), lambda s, x: s + x)) == 10


def test_errors_subclass_builtins():
    assert issubclass(errors.InvalidArgumentError, ValueError)
    assert issubclass(errors.NotFoundError, FileNotFoundError)
    assert issubclass(errors.DataLossError, OSError)
    assert issubclass(errors.OutOfRangeError, IndexError)


# ------------------------------------------------------------------------------------------- resume
@pytest.mark.parametrize("make", [
    lambda: Dataset.range(7).map(lambda x: x * 3).batch(2),
    lambda: Dataset.range(12).shuffle(4, seed=2).repeat(2).batch(5),
    lambda: Dataset.from_tensor_slices(np.arange(20.0)).shard(3, 1).skip(1).take(4),
    lambda: Dataset.range(30).map(lambda x: x + 1, num_parallel_calls=3).prefetch(4).batch(4),
    lambda: Dataset.range(10).map(lambda x: x).shuffle(3, seed=9),
    lambda: Dataset.range(25).batch(3, num_parallel_calls=2),
])
def test_resume_at_every_position(make):
    assert_resumes_everywhere(make)


def test_state_from_another_pipeline_is_refused():
    state = iter(Dataset.range(5)).get_state()
    with pytest.raises(errors.FailedPreconditionError, match="different pipeline"):
        Dataset.range(6).make_iterator(state=state)
    with pytest.raises(errors.InvalidArgumentError):
        Dataset.range(5).make_iterator(state={"nope": 1})
    assert pickle.loads(pickle.dumps(state)) == state


def test_garbage_collected_iterator_stops_its_threads():
    import gc
    import threading
    import time

    before = threading.active_count()
    it = iter(Dataset.range(10**6).map(lambda x: x, num_parallel_calls=2).prefetch(10))
    next(it)
    del it
    gc.collect()
    deadline = time.time() + 5
    while threading.active_count() > before and time.time() < deadline:
        time.sleep(0.01)
    assert threading.active_count() <= before


def test_experimental_deterministic_is_an_alias():
    o = Options()
    o.experimental_deterministic = False
    assert o.deterministic is False and o.experimental_deterministic is False


def test_batch_of_elements_with_different_structures_is_an_error_not_truncation():
    def f(x):
        return (x, x) if x < 2 else (x, x, x)

    with pytest.raises(errors.InvalidArgumentError, match="structure"):
        list(Dataset.range(4).map(f).batch(4))


@settings(max_examples=80, deadline=None, database=None)
@given(dtype=st.sampled_from(["int8", "uint16", ">i4", "int64", "float16", "float32", "<f8", "complex64", "bool",
                              "datetime64[s]"]),
       shape=st.lists(st.integers(0, 4), max_size=3), n=st.integers(1, 9),
       layout=st.sampled_from(["C", "F", "strided"]))
def test_batch_stacks_like_arrays_exactly_whatever_their_layout(dtype, shape, n, layout):
    # like arrays are joined byte-wise (bytearray.join); views without a plain buffer go element by element
    rng = np.random.default_rng(0)
    values = []
    for _ in range(n):
        a = rng.integers(0, 100, size=[s * (2 if layout == "strided" else 1) for s in shape]).astype(dtype)
        a = a[tuple(slice(None, None, 2) for _ in shape)] if layout == "strided" else a
        values.append(np.array(a, order="F") if layout == "F" else a)
    want = np.stack(values)
    want = want.astype(want.dtype.newbyteorder("="))  # (byte order is not what this test is about)
    plain = Options()
    plain.experimental_optimization.map_and_batch_fusion = False
    for ds in (Dataset.range(n).map(lambda i: values[int(i)]),  # fused map and batch
               Dataset.range(n).map(lambda i: values[int(i)]).with_options(plain)):  # batch of a map's elements
        got = next(iter(ds.batch(n)))
        assert got.dtype.newbyteorder("=") == want.dtype and got.shape == want.shape and np.array_equal(got, want)
        assert got.flags.writeable and not any(np.shares_memory(got, v) for v in values)


def test_dataset_node_is_the_graph_root_and_read_only():
    ds = Dataset.range(3).map(lambda x: x + 1)
    assert ds.node is ds._node
    assert ds.node.kind == "Map" and ds.node.inputs[0].kind == "Range"
    with pytest.raises(AttributeError):
        ds.node = Dataset.range(1).node
