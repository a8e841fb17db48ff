"""ignore_errors: what it skips, what it records (the error-propagation contract)."""

import logging

import numpy as np
import pytest

from jaxfeed.pipeline import Dataset, Options, TensorSpec, errors
from jaxfeed.pipeline.testing import assert_resumes_everywhere

from node_test_helpers import ints


def fail_on(*bad):
    def fn(x):
        if int(x) in bad:
            raise ValueError(f"bad element {int(x)}")
        return x

    return fn


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
