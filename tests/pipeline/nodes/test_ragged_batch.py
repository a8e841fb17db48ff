"""``ragged_batch`` / ``sparse_batch`` (and tf.data.experimental's dense_to_* forms), against what tf.data
2.21 gave for the same pipelines (values recorded by hand from TF, in the comments)."""

import numpy as np
import pytest

import jaxfeed.data as tfdata
from jaxfeed.pipeline import RaggedSpec, RaggedValue, SparseSpec, SparseValue, TensorSpec, checkpoint
from jaxfeed.pipeline.errors import InvalidArgumentError


def _ranges(n):
    return tfdata.Dataset.range(n).map(lambda x: np.arange(x))


def test_ragged_batch_gives_rows_and_row_splits_as_tf():
    ds = _ranges(6).ragged_batch(4)
    assert ds.element_spec == RaggedSpec((None, None), np.int64)  # TF: RaggedTensorSpec([None, None], int64)
    a, b = list(ds)
    assert isinstance(a, RaggedValue)
    assert [r.tolist() for r in a] == [[], [0], [0, 1], [0, 1, 2]] and a.row_splits.tolist() == [0, 0, 1, 3, 6]
    assert [r.tolist() for r in b] == [[0, 1, 2, 3], [0, 1, 2, 3, 4]] and b.row_splits.tolist() == [0, 4, 9]
    assert a.row_splits.dtype == np.int64 and len(a) == 4


def test_known_shapes_stay_dense_and_drop_remainder_fixes_the_rows():
    ds = tfdata.Dataset.range(5).map(lambda x: {"v": np.arange(x), "n": x}).ragged_batch(2, drop_remainder=True)
    assert ds.element_spec == {"v": RaggedSpec((2, None), np.int64), "n": TensorSpec((2,), np.int64)}
    got = [({k: (v.to_list() if isinstance(v, RaggedValue) else v) for k, v in b.items()}) for b in ds]
    assert [[r.tolist() for r in g["v"]] for g in got] == [[[], [0]], [[0, 1], [0, 1, 2]]]
    assert [g["n"].tolist() for g in got] == [[0, 1], [2, 3]]


def test_unbatch_gives_the_rows_back():
    ds = _ranges(5).ragged_batch(2).unbatch()
    assert [x.tolist() for x in ds] == [[], [0], [0, 1], [0, 1, 2], [0, 1, 2, 3]]
    assert ds.element_spec == TensorSpec((None,), np.int64)


def test_a_ragged_value_speaks_var_len_values_interface():
    (batch,) = list(_ranges(3).ragged_batch(3))
    indices, values, dense_shape = batch.to_sparse()
    assert indices.tolist() == [[1, 0], [2, 0], [2, 1]] and values.tolist() == [0, 0, 1]
    assert dense_shape.tolist() == [3, 2] and batch.lengths.tolist() == [0, 1, 2]


def test_only_the_first_dimension_may_differ():
    ds = tfdata.Dataset.range(3).map(lambda x: np.zeros((x + 1, x + 1))).ragged_batch(3)
    with pytest.raises(InvalidArgumentError, match="only the first dimension"):
        list(ds)


def test_sparse_batch_lists_every_entry_with_the_row_shape():
    ds = tfdata.Dataset.range(1, 5).map(lambda x: np.arange(x)).apply(
        tfdata.experimental.dense_to_sparse_batch(2, [4]))
    assert ds.element_spec == SparseSpec((None, 4), np.int64)  # TF: SparseTensorSpec([None, 4], int64)
    a, b = list(ds)
    assert isinstance(a, SparseValue)
    assert a.indices.tolist() == [[0, 0], [1, 0], [1, 1]] and a.values.tolist() == [0, 0, 1]
    assert a.dense_shape.tolist() == [2, 4]
    assert b.indices.tolist() == [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2], [1, 3]]
    assert b.to_dense().tolist() == [[0, 1, 2, 0], [0, 1, 2, 3]]
    with pytest.raises(InvalidArgumentError, match="larger than row_shape"):
        list(_ranges(6).sparse_batch(2, [3]))


def test_dense_to_ragged_batch_is_ragged_batch():
    a = [r.row_splits.tolist() for r in _ranges(5).apply(tfdata.experimental.dense_to_ragged_batch(2))]
    assert a == [[0, 0, 1], [0, 2, 5], [0, 4]]


def test_what_cannot_hold_ragged_values_refuses_them():
    with pytest.raises(InvalidArgumentError, match="ragged or sparse"):
        list(_ranges(4).ragged_batch(2).batch(2))
    it = _ranges(6).ragged_batch(2).shuffle(3, seed=1).make_iterator()
    next(it)
    with pytest.raises(InvalidArgumentError, match="RaggedValue"):
        checkpoint.serialize(it.get_state())
    with pytest.raises(ValueError):
        _ranges(3).ragged_batch(None)


def test_distribution_refuses_ragged_components_with_a_clear_message():
    jax = pytest.importorskip("jax")
    from jaxfeed.distribute import MirroredStrategy

    strategy = MirroredStrategy(jax.local_devices()[:2])
    ds = _ranges(8).ragged_batch(4)
    with pytest.raises(TypeError, match="ragged"):
        strategy.experimental_distribute_dataset(ds)
    with pytest.raises(TypeError, match="ragged"):
        iter(strategy.distribute_datasets_from_function(lambda ctx: ds))


def test_the_spec_of_ragged_values_stays_ragged_through_map_rebatch_and_concatenate():
    """Found by differential fuzzing: a map's spec (``relax``), rebatch's and concatenate's turned a RaggedSpec
    into a TensorSpec while the elements stayed RaggedValues -- a spec contradicting its elements."""
    ragged = _ranges(5).ragged_batch(2)
    for ds in (ragged.map(lambda x: x), ragged.rebatch(1), ragged.concatenate(ragged)):
        assert type(ds.element_spec) is RaggedSpec, ds.element_spec
        assert all(isinstance(x, RaggedValue) and ds.element_spec.is_compatible_with(x) for x in ds)
    with pytest.raises(TypeError, match="Incompatible dataset elements"):  # ragged values and dense ones
        ragged.concatenate(_ranges(5).padded_batch(2))


@pytest.mark.parametrize("batching", ["batch", "padded_batch", "ragged_batch"])
@pytest.mark.parametrize("after_map", [False, True])
def test_batching_ragged_values_again_is_refused_with_the_same_error(batching, after_map):
    """padded_batch and ragged_batch of ragged values failed with a numpy "inhomogeneous shape" ValueError
    and a "'>' not supported between NoneType" TypeError of their own."""
    ragged = _ranges(5).ragged_batch(2)
    with pytest.raises(InvalidArgumentError, match="ragged or sparse"):
        list(getattr(ragged.map(lambda x: x) if after_map else ragged, batching)(2))
