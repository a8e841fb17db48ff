"""The Dataset object: immutable and re-iterable, its graph, options, length, and the methods that consume it
(get_single_element, reduce, apply)."""

import numpy as np
import pytest

from jaxfeed.pipeline import Dataset, Options, errors


def values(ds):
    return [np.asarray(x).tolist() for x in ds]


def test_len_raises_for_infinite_and_unknown():
    with pytest.raises(TypeError, match="infinite"):
        len(Dataset.range(3).repeat())
    assert len(Dataset.range(3)) == 3


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


def test_experimental_deterministic_is_an_alias():
    o = Options()
    o.experimental_deterministic = False
    assert o.deterministic is False and o.experimental_deterministic is False


def test_dataset_node_is_the_graph_root_and_read_only():
    ds = Dataset.range(3).map(lambda x: x + 1)
    assert ds.node is ds._node
    assert ds.node.kind == "Map" and ds.node.inputs[0].kind == "Range"
    with pytest.raises(AttributeError):
        ds.node = Dataset.range(1).node


def ints(ds):
    return [int(x) for x in ds]


# --------------------------------------------------------------------------------- apply/reduce/single
def test_apply_returns_the_function_result():
    assert ints(Dataset.range(5).apply(lambda ds: ds.filter(lambda x: x > 2))) == [3, 4]


def test_apply_requires_a_dataset_result():
    with pytest.raises(TypeError, match="`transformation_func` must return a"):
        Dataset.range(3).apply(lambda ds: 3)


def test_reduce_folds_elements_in_order():
    assert int(Dataset.range(5).reduce(np.int64(0), lambda s, x: s + x)) == 10
    assert Dataset.from_tensor_slices(["a", "b"]).reduce(b"", lambda s, x: s + x) == b"ab"
    assert int(Dataset.range(0).reduce(np.int64(7), lambda s, x: s + x)) == 7


def test_reduce_passes_a_tuple_element_whole():
    assert int(Dataset.range(4).enumerate(10).reduce(np.int64(0), lambda s, pair: s + pair[0])) == 46


def test_reduce_state_dtype_must_not_change():
    with pytest.raises(TypeError):
        Dataset.range(3).reduce(0, lambda s, x: s + x)


def test_get_single_element():
    assert int(Dataset.range(1).get_single_element()) == 0
    with pytest.raises(errors.InvalidArgumentError, match="Dataset had more than one element"):
        Dataset.range(2).get_single_element()
    with pytest.raises(errors.InvalidArgumentError, match="empty"):
        Dataset.range(0).get_single_element()
