"""tf.data semantics of rebatch (docs/tf-behaviour.md#rebatch)."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from jaxfeed.pipeline import Dataset, TensorSpec, errors
from jaxfeed.pipeline.dataset import UNKNOWN_CARDINALITY
from jaxfeed.pipeline.engine.rows import regroup
from jaxfeed.pipeline.testing import assert_resumes_everywhere

from node_test_helpers import values


# --------------------------------------------------------------------------------------------- rebatch
def test_rebatch_crosses_input_batch_boundaries():  # 2.4
    assert values(Dataset.range(10).batch(2).rebatch(5)) == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]


def test_rebatch_uses_a_list_of_sizes_in_turn():  # 2.4, verified example
    assert values(Dataset.range(10).batch(4).rebatch([2, 1, 1])) == [[0, 1], [2], [3], [4, 5], [6], [7], [8, 9]]


def test_rebatch_size_zero_gives_empty_batches_but_none_after_the_data():  # 2.4 QUIRK, documented deviation
    assert values(Dataset.range(6).batch(4).rebatch([0, 2])) == [[], [0, 1], [], [2, 3], [], [4, 5]]


def test_rebatch_rejects_all_zero_sizes():  # docs/tf-behaviour.md#rebatch
    with pytest.raises(errors.InvalidArgumentError, match="all 0"):
        Dataset.range(6).batch(2).rebatch(0)
    with pytest.raises(errors.InvalidArgumentError):
        Dataset.range(6).batch(2).rebatch([0, 0])
    with pytest.raises(errors.InvalidArgumentError):
        Dataset.range(6).batch(2).rebatch([2, -1])


def test_rebatch_of_unbatched_data_is_value_error():
    with pytest.raises(ValueError):
        Dataset.range(6).rebatch(2)


def test_rebatch_drop_remainder_drops_the_last_partial_batch():
    assert values(Dataset.range(7).batch(3).rebatch(2, drop_remainder=True)) == [[0, 1], [2, 3], [4, 5]]


def test_rebatch_element_spec_is_static_only_when_no_partial_batch_is_possible():  # 2.4 / 8
    assert Dataset.range(12).batch(4, drop_remainder=True).rebatch(2).element_spec == TensorSpec((2,), np.int64)
    assert Dataset.range(12).batch(4).rebatch(2).element_spec == TensorSpec((None,), np.int64)
    assert Dataset.range(12).batch(4).rebatch(2, drop_remainder=True).element_spec == TensorSpec((2,), np.int64)
    assert Dataset.range(12).batch(4, drop_remainder=True).rebatch([2, 1]).element_spec == TensorSpec((None,), np.int64)
    assert Dataset.range(12).batch(4).rebatch(2).cardinality() == UNKNOWN_CARDINALITY


def test_rebatch_keeps_nested_structures_and_strings():
    ds = Dataset.from_tensor_slices({"s": np.array([b"a", b"b", b"c"], dtype=object), "x": np.arange(3)}).batch(2)
    out = list(ds.rebatch(3))
    assert out[0]["s"].tolist() == [b"a", b"b", b"c"] and out[0]["x"].tolist() == [0, 1, 2]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 30), in_size=st.integers(1, 7), sizes=st.lists(st.integers(0, 5), min_size=1, max_size=4)
       .filter(any), drop=st.booleans())
def test_rebatch_equals_unbatch_then_batch_by_turns(n, in_size, sizes, drop):
    got = values(Dataset.range(n).batch(in_size).rebatch(sizes, drop_remainder=drop))
    rows, expected, turn = list(range(n)), [], 0
    while rows:
        size = sizes[turn % len(sizes)]
        turn += 1
        if len(rows) < size and drop:
            break
        expected.append(rows[:size])
        rows = rows[size:]
    assert got == expected


def test_regroup_splits_a_global_batch_into_views():  # what the distribute layer reuses
    global_batch = {"x": np.arange(8).reshape(4, 2), "y": np.arange(4)}
    parts = regroup([global_batch], [1, 1, 1, 1])
    assert [p["y"].tolist() for p in parts] == [[0], [1], [2], [3]]
    assert all(np.shares_memory(p["x"], global_batch["x"]) for p in parts)
    assert [p.tolist() for p in regroup([np.arange(3), np.arange(3, 5)], 2, drop_remainder=True)] == [[0, 1], [2, 3]]


def test_rebatch_resumes_with_a_partial_output_pending():
    assert_resumes_everywhere(lambda: Dataset.range(11).batch(3).rebatch([4, 0, 2]))


# ------------------------------------- input batches whose rows differ in shape: tf.data's InvalidArgumentError, not numpy's
def test_rebatch_across_batches_with_different_row_shapes_is_an_invalid_argument_error_naming_the_shapes():
    ds = Dataset.range(2).map(lambda i: np.zeros((2, 3 + int(i)), np.float32)).rebatch(3)
    with pytest.raises(errors.InvalidArgumentError, match="Cannot add tensor to the batch") as info:
        list(ds)
    message = str(info.value)
    assert "Rebatch" in message  # the transformation
    assert "Shapes are: [tensor]: [4], [batch]: [3]" in message


def test_rebatch_error_names_the_leaf_of_a_nested_element():
    ds = Dataset.range(2).map(
        lambda i: {"a": np.ones(2, np.float32), "b": np.zeros((2, 1 + int(i)), np.int64)}).rebatch([3, 1])
    with pytest.raises(errors.InvalidArgumentError, match=r"\[tensor\]: \[2\], \[batch\]: \[1\].*leaf 1"):
        list(ds)


def test_rebatch_of_rows_with_equal_shapes_still_crosses_batch_boundaries():
    out = list(Dataset.range(8).batch(3).rebatch(4))
    assert [b.tolist() for b in out] == [[0, 1, 2, 3], [4, 5, 6, 7]]
