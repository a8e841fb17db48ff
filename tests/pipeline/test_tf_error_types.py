"""Arguments and values tf.data accepts or refuses, with tf.data's error types (issue 14, defect 13):
None arguments, ``Dataset.counter``, a scalar ``padded_shapes``, and dataset-valued elements."""

import pickle

import numpy as np
import pytest

from jaxfeed.distribute.auto_sharding import auto_shard, auto_shard_plan
from jaxfeed.formats import TFRecordDataset, TFRecordWriter
from jaxfeed.pipeline import AUTOTUNE, INFINITE_CARDINALITY, Dataset, DatasetSpec, TensorSpec
from jaxfeed.pipeline import checkpoint
from jaxfeed.pipeline.errors import InvalidArgumentError
from jaxfeed.pipeline.testing import assert_elements_equal, assert_resumes_everywhere


def values(ds):
    return [np.asarray(x).tolist() for x in ds]


# ----------------------------------------------------------------------------------------- None arguments
# tf.data converts these arguments to int64 tensors; ``convert_to_tensor(None)`` raises ValueError.
NONE_ARGUMENTS = {
    "take": lambda ds: ds.take(None),
    "skip": lambda ds: ds.skip(None),
    "batch": lambda ds: ds.batch(None),
    "padded_batch": lambda ds: ds.padded_batch(None),
    "shard num_shards": lambda ds: ds.shard(None, 0),
    "shard index": lambda ds: ds.shard(2, None),
    "window size": lambda ds: ds.window(None),
    "window stride": lambda ds: ds.window(2, stride=None),
    "shuffle buffer_size": lambda ds: ds.shuffle(None),
    "enumerate start": lambda ds: ds.enumerate(None),
    "range": lambda ds: Dataset.range(None),
    "counter": lambda ds: Dataset.counter(None),
    "cache filename": lambda ds: ds.cache(None),
    "list_files": lambda ds: Dataset.list_files(None),
}


@pytest.mark.parametrize("name", sorted(NONE_ARGUMENTS))
def test_a_none_count_or_size_is_a_value_error(name):
    with pytest.raises(ValueError, match="None"):
        NONE_ARGUMENTS[name](Dataset.range(4))


@pytest.mark.parametrize("bad", [2.0, "2"])
def test_a_non_integer_count_is_still_a_type_error(bad):  # docs/tf-behaviour.md#arguments
    for make in (lambda: Dataset.range(4).take(bad), lambda: Dataset.range(4).batch(bad),
                 lambda: Dataset.range(4).shard(bad, 0), lambda: Dataset.range(4).prefetch(bad)):
        with pytest.raises(TypeError):
            make()


def test_none_where_tf_data_gives_it_a_meaning():
    ds = Dataset.range(3)
    assert ds.repeat(None).cardinality() == INFINITE_CARDINALITY  # forever (docs/tf-behaviour.md#arguments)
    assert ds.prefetch(None)._node.buffer_size == AUTOTUNE  # tf.data's prefetch: None means AUTOTUNE
    assert values(ds.prefetch(None)) == [0, 1, 2]
    assert values(ds.window(2, shift=None).flat_map(lambda w: w.batch(2))) == [[0, 1], [2]]  # shift = size
    assert values(ds.interleave(lambda x: Dataset.from_tensors(x), cycle_length=None, block_length=None)) == [0, 1, 2]


# ------------------------------------------------------------------------------------------------ counter
def test_counter_counts_down_with_a_negative_step():
    assert values(Dataset.counter(0, -1).take(4)) == [0, -1, -2, -3]  # was: nothing
    assert values(Dataset.counter(10, -3).take(3)) == [10, 7, 4]


def test_counter_is_infinite():
    assert Dataset.counter().cardinality() == INFINITE_CARDINALITY  # was 2**63 - 1
    assert Dataset.counter(0, -1).cardinality() == INFINITE_CARDINALITY
    assert Dataset.counter().take(5).cardinality() == 5
    assert Dataset.counter().batch(3).cardinality() == INFINITE_CARDINALITY
    assert Dataset.zip(Dataset.counter(), Dataset.range(4)).cardinality() == 4


def test_counter_step_zero_repeats_start_and_narrow_types_wrap_as_tf_s():
    assert values(Dataset.counter(5, 0).take(3)) == [5, 5, 5]
    got = list(Dataset.counter(2**31 - 2, 1, dtype=np.int32).take(3))
    assert [x.dtype for x in got] == [np.int32] * 3
    assert [int(x) for x in got] == [2**31 - 2, 2**31 - 1, -(2**31)]


def test_counter_spec_and_resume():
    assert Dataset.counter(dtype=np.int32).element_spec == TensorSpec((), np.int32)
    assert_resumes_everywhere(lambda: Dataset.counter(3, -2).take(6))


# ------------------------------------------------------------------------------------ padded_shapes=int
def ragged(n=4):
    return Dataset.range(1, n + 1).map(lambda x: np.arange(x))


@pytest.mark.parametrize("shape", [5, np.int64(5), [5]])
def test_a_scalar_padded_shape_is_a_1d_shape(shape):  # tf.TensorShape(5) == [5]
    ds = ragged().padded_batch(2, padded_shapes=shape)
    assert ds.element_spec == TensorSpec((None, 5), np.int64)
    assert [b.tolist() for b in ds] == [[[0, 0, 0, 0, 0], [0, 1, 0, 0, 0]], [[0, 1, 2, 0, 0], [0, 1, 2, 3, 0]]]


def test_a_scalar_padded_shape_for_a_scalar_component_is_refused_at_construction():
    with pytest.raises(ValueError, match="not compatible"):
        Dataset.range(3).padded_batch(2, padded_shapes=5)


# --------------------------------------------------------------------------------- dataset-valued elements
def test_map_may_return_a_dataset():
    ds = Dataset.range(3).map(lambda x: Dataset.range(x))
    assert ds.element_spec == DatasetSpec(TensorSpec((), np.int64))
    assert values(ds.flat_map(lambda d: d)) == [0, 0, 1]
    assert values(ds.interleave(lambda d: d, cycle_length=2)) == [0, 0, 1]
    assert values(ds.interleave(lambda d: d, cycle_length=2, num_parallel_calls=2)) == [0, 0, 1]
    assert values(Dataset.range(3).map(lambda x: Dataset.range(x), num_parallel_calls=2).flat_map(lambda d: d)) == \
        [0, 0, 1]


def test_a_dataset_can_sit_inside_a_structure():
    ds = Dataset.range(3).map(lambda x: (x, Dataset.range(x)))
    assert ds.element_spec == (TensorSpec((), np.int64), DatasetSpec(TensorSpec((), np.int64)))
    assert values(ds.flat_map(lambda x, d: d.map(lambda v: v + 10 * x))) == [10, 20, 21]


@pytest.fixture
def tfrecord_files(tmp_path):
    paths = []
    for f in range(4):
        p = str(tmp_path / f"f{f}.tfrecord")
        with TFRecordWriter(p) as w:
            for r in range(2):
                w.write(f"f{f}r{r}".encode())
        paths.append(p)
    return paths


def test_map_tfrecord_dataset_then_flat_map_reads_every_file(tfrecord_files):
    ds = Dataset.from_tensor_slices(tfrecord_files).map(TFRecordDataset).flat_map(lambda d: d)
    assert [x.decode() for x in ds] == [f"f{f}r{r}" for f in range(4) for r in range(2)]
    make = lambda: Dataset.from_tensor_slices(tfrecord_files).map(TFRecordDataset).flat_map(lambda d: d)  # noqa: E731
    # Its states resume exactly when kept in memory (here through pickle), after every element. The
    # checkpoint format refuses them: flat_map's state holds its current element, a reader Dataset, which
    # the format does not encode (only in-memory datasets). So the shared harness, which saves through the
    # format, cannot be used here; the refusal is asserted instead (open question for issue 17).
    expected = list(make())
    for k in range(len(expected) + 1):
        first = iter(make())
        head = [next(first) for _ in range(k)]
        state = pickle.loads(pickle.dumps(first.get_state()))
        first.close()
        with make().make_iterator(state=state) as restored:
            assert_elements_equal(head + list(restored), expected, what=f"resume after {k}")
    with iter(make()) as it:
        next(it)
        with pytest.raises(InvalidArgumentError, match="holds a Dataset"):
            checkpoint.serialize(it.get_state())


@pytest.mark.parametrize("combine", [lambda ds: ds.flat_map(lambda d: d),
                                     lambda ds: ds.interleave(lambda d: d, cycle_length=1),
                                     lambda ds: ds.interleave(lambda d: d, cycle_length=1, num_parallel_calls=1)])
def test_file_auto_shard_finds_the_reader_a_map_makes(tfrecord_files, combine):
    ds = combine(Dataset.from_tensor_slices(tfrecord_files).map(TFRecordDataset))
    assert [x.decode() for x in auto_shard(ds, 2, 1)] == ["f1r0", "f1r1", "f3r0", "f3r1"]
    plan = auto_shard_plan(ds, 2)
    assert plan.policy.name == "FILE" and plan.complete and plan.disjoint
    assert plan.workers[1].files == [tfrecord_files[1], tfrecord_files[3]]


def test_file_auto_shard_of_a_map_that_makes_no_reader_still_refuses_file():
    ds = Dataset.range(4).map(lambda x: Dataset.range(x)).flat_map(lambda d: d)
    plan = auto_shard_plan(ds, 2)
    assert plan.policy.name == "DATA"


def test_batching_dataset_valued_elements_is_refused_with_a_clear_error():
    with pytest.raises(TypeError, match="cannot be batched"):
        Dataset.range(5).window(2).batch(2)
    with pytest.raises(TypeError, match="cannot be batched"):
        Dataset.range(3).map(lambda x: Dataset.range(x)).batch(2).element_spec


@pytest.mark.parametrize("batching", [
    lambda ds: ds.batch(1), lambda ds: ds.batch(2, num_parallel_calls=2), lambda ds: ds.padded_batch(2),
    lambda ds: ds.ragged_batch(1), lambda ds: ds.bucket_by_sequence_length(lambda w: 1, [5], [2, 2]),
    lambda ds: ds.map(lambda w: (w, 1)).batch(2)])
@pytest.mark.parametrize("after_map", [False, True])
def test_iterating_a_batch_of_dataset_valued_elements_raises_instead_of_yielding_datasets(batching, after_map):
    """Iterated without the spec asked (a map before: its spec is lazy), the batch stacked the windows into object
    arrays of Dataset objects -- an internal object handed to the user -- and padded_batch/ragged_batch failed
    with an AttributeError of a DatasetSpec (found by differential fuzzing against tf.data)."""
    windows = Dataset.range(4).window(2)
    with pytest.raises(TypeError, match="cannot be batched"):
        list(batching(windows.map(lambda w: w) if after_map else windows))


def test_enumerate_counts_with_an_infinite_counter():
    # tf.data zips with counter(start): an infinite input stays infinite (was 2**63 - 1)
    assert Dataset.range(2).repeat().enumerate().cardinality() == INFINITE_CARDINALITY
    with pytest.raises(TypeError, match="infinite"):
        len(Dataset.range(2).repeat().enumerate())
    assert Dataset.range(3).enumerate(5).cardinality() == 3
    assert values(Dataset.range(3).enumerate(-2)) == [[-2, 0], [-1, 1], [0, 2]]
