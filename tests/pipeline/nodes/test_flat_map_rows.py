"""``flat_map`` under a ``batch`` hands on its inner datasets' stacked rows (``FlatMapIterator.next_rows``): a
port's ``files.flat_map(lambda f: from_generator(rows_of, args=(f,)))`` reads each file's rows as columns,
as ``from_generator`` alone or interleaved does. A fast path: batches, errors and their places,
``ignore_errors`` and resumed runs must be exactly those of the element-by-element path."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxfeed.pipeline import Dataset
from jaxfeed.pipeline.iterators import batch as batch_module
from jaxfeed.pipeline.testing import assert_resumes_everywhere

from test_generator_columns import (assert_same_runs, element_path, generator_of, p6_rows, p6_spec, rows_for, run,
                                    signatures)


def flat_mapped(spec, files, batch, drop=False, slices_for=()):
    """A generator per file, flat-mapped and batched; files whose index is in ``slices_for`` come from
    ``from_tensor_slices`` instead (an inner dataset that hands out elements, not rows)."""
    gen = generator_of(files)

    def inner(i):
        i = int(i)
        if i in slices_for:
            return Dataset.from_tensor_slices({k: np.array([row[k] for row in files[i]], spec[k].dtype)
                                               for k in spec}) if files[i] else Dataset.from_generator(
                gen, args=(i,), output_signature=spec, replayable=True)
        return Dataset.from_generator(gen, args=(i,), output_signature=spec, replayable=True)

    return Dataset.range(len(files)).flat_map(inner).batch(batch, drop_remainder=drop)


def counting_stacks(monkeypatch):
    stacked = []
    original = batch_module.stack_fast
    monkeypatch.setattr(batch_module, "stack_fast", lambda elements, what: stacked.append(len(elements)) or
                        original(elements, what))
    return stacked


def test_flat_mapped_generators_hand_the_batch_columns(monkeypatch):
    # before, every row became an element (a dict of numpy scalars) for the batch to stack again
    stacked = counting_stacks(monkeypatch)
    files = [p6_rows(700, s) for s in range(3)]
    got = run(flat_mapped(p6_spec(), files, 256))
    assert [len(b["id"]) for b in got] == [256] * 8 + [52] and stacked == []
    assert list(got[0]) == list(p6_spec()) and got[0]["text"].dtype == object and got[0]["label"].dtype == np.int32
    with element_path():
        assert_same_runs(got, run(flat_mapped(p6_spec(), files, 256)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_flat_mapped_generators_batch_as_the_element_path_does(data):
    spec = data.draw(signatures())
    bad = data.draw(st.sampled_from([0.0, 0.0, 0.02, 0.1]))
    files = [data.draw(rows_for(spec, data.draw(st.integers(0, 60)), bad)) for _ in range(data.draw(st.integers(1, 5)))]
    batch, drop = data.draw(st.sampled_from([1, 3, 8, 25, 64])), data.draw(st.booleans())
    make = lambda: flat_mapped(spec, files, batch, drop)  # noqa: E731
    with element_path():
        expected = run(make())
    assert_same_runs(run(make()), expected)
    assert_same_runs(run(make().ignore_errors()), [b for b in expected if not isinstance(b, tuple) or
                                                   not isinstance(b[0], type)])


def test_inner_datasets_of_elements_and_of_rows_mix_in_one_batch():
    # files 1 and 3 come from from_tensor_slices (elements): a batch joins rows and elements in their order
    files = [p6_rows(n, s) for s, n in enumerate([30, 17, 0, 41, 9])]
    spec = {k: v for k, v in p6_spec().items() if k != "text"}
    files = [[{k: v for k, v in row.items() if k != "text"} for row in rows] for rows in files]
    got = run(flat_mapped(spec, files, 16, slices_for=(1, 3)))
    with element_path():
        expected = run(flat_mapped(spec, files, 16, slices_for=(1, 3)))
    assert_same_runs(got, expected)
    assert np.array_equal(np.concatenate([b["id"] for b in got]), [r["id"] for rows in files for r in rows])


@pytest.mark.parametrize("ignore", [False, True])
def test_errors_of_the_input_of_map_func_and_of_a_generator_stand_where_they_stood(ignore):
    files = [p6_rows(20, s) for s in range(5)]
    files[3][11]["score"] = "bad"  # a value the signature refuses, mid-file

    def boom_at_one(i):
        if i == 1:
            raise ValueError("input boom")
        return i

    def inner(i):
        if int(i) == 2:
            raise KeyError("map_func boom")
        return Dataset.from_generator(generator_of(files), args=(i,), output_signature=p6_spec())

    def make():
        ds = Dataset.range(5).map(boom_at_one).flat_map(inner).batch(6)
        return ds.ignore_errors() if ignore else ds

    got = run(make())
    with element_path():
        expected = run(make())
    assert_same_runs(got, expected)
    errors = [b for b in got if isinstance(b, tuple)]
    assert (len(errors) == 0) if ignore else (len(errors) == 3)


def test_a_generator_that_raises_after_its_rows_ends_its_file_only():
    def rows_then_raise(i):
        yield from p6_rows(10, int(i))
        if int(i) == 0:
            raise RuntimeError("generator boom")

    def make():
        return Dataset.range(2).flat_map(
            lambda i: Dataset.from_generator(rows_then_raise, args=(i,), output_signature=p6_spec())).batch(4)

    got = run(make())
    with element_path():
        expected = run(make())
    assert_same_runs(got, expected)
    assert "generator boom" in got[2][1] and [len(b["id"]) for b in got[3:]] == [4, 4, 2]


@pytest.mark.parametrize("columns", [True, False])
def test_flat_mapped_generators_resume_everywhere(columns):
    files = [p6_rows(n, s) for s, n in enumerate([23, 0, 11, 30])]
    files[2][7]["score"] = "bad"  # an error mid-file, batched in its place
    make = lambda: flat_mapped(p6_spec(), files, 5).ignore_errors()  # noqa: E731
    with element_path():
        expected = run(make())
    if columns:
        got = assert_resumes_everywhere(make, label="flat-mapped generators")
    else:
        with element_path():
            got = assert_resumes_everywhere(make, label="flat-mapped generators")
    assert_same_runs(got, expected)
