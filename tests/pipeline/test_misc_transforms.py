"""scan, unique, take_while, ignore_errors, apply, reduce and get_single_element
(docs/tf-behaviour.md#iteration, #arguments and the error-propagation contract)."""

import logging

import numpy as np
import pytest

from jaxfeed.pipeline import Dataset, Options, TensorSpec, errors
from jaxfeed.pipeline.dataset import UNKNOWN_CARDINALITY
from jaxfeed.pipeline.testing import assert_resumes_everywhere


def ints(ds):
    return [int(x) for x in ds]


def fail_on(*bad):
    def fn(x):
        if int(x) in bad:
            raise ValueError(f"bad element {int(x)}")
        return x

    return fn


# ------------------------------------------------------------------------------------------------ scan
def test_scan_carries_state_and_emits_outputs():
    ds = Dataset.range(5).scan(np.int64(0), lambda state, x: (state + x, state * 10))
    assert ints(ds) == [0, 0, 10, 30, 60]
    assert ds.element_spec == TensorSpec((), np.int64) and ds.cardinality() == 5


def test_scan_passes_a_tuple_element_whole():
    ds = Dataset.range(3).enumerate().scan(np.int64(0), lambda state, pair: (state + pair[1], state))
    assert ints(ds) == [0, 0, 1]


def test_scan_state_may_be_a_structure():
    ds = Dataset.range(4).scan((np.int64(0), np.int64(1)), lambda s, x: ((s[0] + x, s[1] * 2), s[0] + s[1]))
    assert ints(ds) == [1, 2, 5, 11]


def test_scan_state_dtype_must_not_change():
    # 0 is int32 [0.2]; adding int64 elements changes the state's dtype, as in tf.data this is an error
    with pytest.raises(TypeError, match="new state must keep"):
        list(Dataset.range(3).scan(0, lambda s, x: (s + x, x)))


def test_scan_function_must_take_two_arguments():
    with pytest.raises(TypeError, match="two arguments"):
        Dataset.range(3).scan(0, lambda x: (x, x))


def test_scan_error_keeps_state_and_goes_on():
    def step(s, x):
        if x == 2:
            raise KeyError("two")
        return s + x, s + x

    it = iter(Dataset.range(5).scan(np.int64(0), step).ignore_errors())
    assert ints(it) == [0, 1, 4, 8]


def test_scan_resumes_everywhere():
    assert_resumes_everywhere(lambda: Dataset.range(8).scan(np.int64(1), lambda s, x: (s * 2 % 97 + x, s)))


# ---------------------------------------------------------------------------------------------- unique
def test_unique_keeps_first_occurrences_of_ints_and_strings():
    assert ints(Dataset.from_tensor_slices([1, 3, 1, 2, 3, 5]).unique()) == [1, 3, 2, 5]
    assert list(Dataset.from_tensor_slices(["b", "a", "b"]).unique()) == [b"b", b"a"]
    assert Dataset.range(3).unique().cardinality() == UNKNOWN_CARDINALITY


def test_unique_rejects_non_integer_elements():
    with pytest.raises(TypeError, match="unique"):
        Dataset.from_tensor_slices(np.zeros(3)).unique()


def test_unique_compares_tensors_by_shape_and_contents_as_tf_data():
    rows = np.array([[1, 2], [3, 4], [1, 2], [2, 1]], np.int64)
    assert [r.tolist() for r in Dataset.from_tensor_slices(rows).unique()] == [[1, 2], [3, 4], [2, 1]]
    words = np.array([["a", "b"], ["a", "b"], ["b", "a"]], dtype=object)
    assert [list(r) for r in Dataset.from_tensor_slices(words).unique()] == [[b"a", b"b"], [b"b", b"a"]]
    assert_resumes_everywhere(lambda: Dataset.from_tensor_slices(rows).unique())


def test_unique_resumes_everywhere():
    data = np.array([4, 1, 4, 4, 2, 1, 7, 2, 9], dtype=np.int64)
    assert_resumes_everywhere(lambda: Dataset.from_tensor_slices(data).unique())
    assert_resumes_everywhere(lambda: Dataset.from_tensor_slices(["x", "y", "x", "z"]).unique())


# ------------------------------------------------------------------------------------------ take_while
def test_take_while_stops_at_the_first_false():
    assert ints(Dataset.from_tensor_slices(np.array([1, 2, 5, 1, 0])).take_while(lambda x: x < 3)) == [1, 2]
    assert Dataset.range(3).take_while(lambda x: True).cardinality() == UNKNOWN_CARDINALITY


def test_take_while_predicate_must_return_scalar_bool():
    with pytest.raises(ValueError, match="scalar bool"):
        list(Dataset.range(3).take_while(lambda x: x))


def test_take_while_resumes_everywhere():
    assert_resumes_everywhere(lambda: Dataset.range(10).map(lambda x: x * 3).take_while(lambda x: x < 20))
    assert_resumes_everywhere(lambda: Dataset.range(10).take_while(lambda x: x < 6).batch(4))


# --------------------------------------------------------------------------------------- ignore_errors
@pytest.mark.parametrize("between", [
    lambda ds: ds.map(fail_on(1, 5, 6)),
    lambda ds: ds.map(fail_on(1, 5, 6), num_parallel_calls=2),
    lambda ds: ds.map(fail_on(1, 5, 6), num_parallel_calls=2).prefetch(3),
    lambda ds: ds.map(fail_on(1, 5, 6)).prefetch(2).map(lambda x: x),
], ids=["map", "parallel_map", "parallel_map_prefetch", "map_prefetch_map"])
def test_ignore_errors_skips_failed_elements_and_keeps_the_rest_of_the_block(between):
    it = iter(between(Dataset.range(10)).ignore_errors())
    out = []
    for block in iter(lambda: it.next_many(64), []):
        out.extend(int(x) for x in block)
    assert out == [0, 2, 3, 4, 7, 8, 9]
    assert [s["position"] for s in it.skipped] == [1, 5, 6]


def test_ignore_errors_record_names_node_error_and_position():
    it = iter(Dataset.range(4).map(fail_on(2)).ignore_errors(name="skipper"))
    assert ints(it) == [0, 1, 3]
    (entry,) = it.skipped
    assert "IgnoreErrors" in entry["node"] and "skipper" in entry["node"]
    assert entry["error"] == "ValueError: bad element 2" and entry["position"] == 2


def test_ignore_errors_records_file_and_offset_of_reader_errors():
    def corrupt(x):
        if x == 1:
            error = errors.DataLossError("corrupted record at 120", "TFRecordDataset")
            error.filename, error.offset = "/data/a.tfrecord", 120
            raise error
        return x

    it = iter(Dataset.range(3).map(corrupt).ignore_errors())
    assert ints(it) == [0, 2]
    assert it.skipped[0]["filename"] == "/data/a.tfrecord" and it.skipped[0]["offset"] == 120
    assert it.skipped[0]["error"].startswith("DataLossError")


def test_ignore_errors_logs_when_asked(caplog):
    with caplog.at_level(logging.WARNING, logger="jaxfeed"):
        list(Dataset.range(3).map(fail_on(1)).ignore_errors(log_warning=True))
    assert "bad element 1" in caplog.text


def test_ignore_errors_record_can_be_switched_off():
    options = Options()
    options.experimental_ignore_errors_record = False
    it = iter(Dataset.range(3).map(fail_on(1)).ignore_errors().with_options(options))
    assert ints(it) == [0, 2] and it.skipped == []


def test_ignore_errors_skips_generator_failure_and_ends():
    def gen():
        yield 1
        raise RuntimeError("generator broke")

    ds = Dataset.from_generator(gen, output_types=np.int64).ignore_errors()
    assert ints(ds) == [1]


def test_ignore_errors_spec_skips_failing_sample():
    ds = Dataset.range(3).map(fail_on(0)).ignore_errors().map(lambda x: x * 2)
    assert ds.element_spec == TensorSpec((), np.int64)


def test_ignore_errors_resumes_everywhere():
    assert_resumes_everywhere(lambda: Dataset.range(10).map(fail_on(0, 3, 4, 9)).ignore_errors())
    assert_resumes_everywhere(
        lambda: Dataset.range(10).map(fail_on(2, 3), num_parallel_calls=2).prefetch(2).ignore_errors())


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
