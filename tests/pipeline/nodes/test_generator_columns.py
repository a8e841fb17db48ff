"""from_generator hands a batch its rows as columns (issue 19): ``next_rows`` gives a block stacked, one array
per leaf, through ``interleave`` (whole rounds woven as columns) to ``batch`` (the engine's stacked-rows
hand-off). It is a fast path: batches, dtypes, dict key order, errors and their places, ``ignore_errors`` and
resumed runs must be exactly those of the element-by-element path, which these tests run alongside by
turning the column path off."""

import contextlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxfeed.pipeline import Dataset, Options, TensorSpec
from jaxfeed.pipeline.iterators import batch as batch_module
from jaxfeed.pipeline.iterators import generator as generator_module
from jaxfeed.pipeline.iterators.batch import stack_fast
from jaxfeed.pipeline.iterators.generator_convert import column_converter, converter
from jaxfeed.pipeline.iterators.interleave import SlotCycle
from jaxfeed.pipeline.testing import assert_resumes_everywhere

from node_test_helpers import same

SCALAR_DTYPES = [np.int8, np.int32, np.int64, np.uint8, np.float32, np.float64, np.bool_, object]

# one kind of value per leaf and block (what the column path takes), and bad values to put mid-block
GOOD = {
    np.dtype(np.int8): st.integers(-128, 127),
    np.dtype(np.int32): st.integers(-2**31, 2**31 - 1),
    np.dtype(np.int64): st.one_of(st.integers(-2**63, 2**63 - 1), st.integers(-5, 5).map(np.int64)),
    np.dtype(np.uint8): st.integers(0, 255),
    np.dtype(np.float32): st.one_of(st.floats(-1e30, 1e30), st.floats(width=32).map(np.float32)),
    np.dtype(np.float64): st.floats(allow_nan=False),
    np.dtype(np.bool_): st.booleans(),
    np.dtype(object): st.one_of(st.text(max_size=4), st.binary(max_size=4)),
}
BAD = st.sampled_from([None, "text", 2**70, 1e300, [1, 2], 0.5, b"x", {"k": 1}])


def leaf(dtype):
    return TensorSpec((), dtype)


def signatures():
    leaves = st.sampled_from(SCALAR_DTYPES).map(leaf)
    shaped = st.just(TensorSpec((2,), np.int64))  # not a column of scalars: the element way throughout
    flat_dict = st.dictionaries(st.sampled_from(["id", "b", "a", "text", "z"]), leaves, min_size=1, max_size=4)
    flat_tuple = st.lists(leaves, min_size=1, max_size=3).map(tuple)
    nested = st.builds(lambda d, t: {**d, "t": t}, flat_dict, flat_tuple)
    with_shaped = st.builds(lambda d, s: {**d, "s": s}, flat_dict, shaped)
    return st.one_of(leaves, flat_dict, flat_tuple, nested, with_shaped)


@st.composite
def rows_for(draw, spec, n, bad_rate):
    """``n`` values for ``spec``: a leaf's values of one kind per stretch, with bad values (and broken
    structures) at about ``bad_rate``."""
    if isinstance(spec, tuple):
        return [tuple(r) for r in zip(*[draw(rows_for(s, n, bad_rate)) for s in spec])]
    if isinstance(spec, dict):
        columns = {k: draw(rows_for(s, n, bad_rate)) for k, s in spec.items()}
        order = list(spec)[::-1] if draw(st.booleans()) else list(spec)  # yielded in another key order
        rows = [{k: columns[k][i] for k in order} for i in range(n)]
        for i in range(n):
            if draw(st.floats(0, 1)) < bad_rate / 3:
                rows[i] = {**rows[i], "extra": 1} if draw(st.booleans()) else dict(list(rows[i].items())[1:])
        return rows
    if spec.shape != ():
        return [np.arange(2, dtype=np.int64) + i for i in range(n)]
    good = GOOD[spec.dtype]
    return [draw(BAD) if draw(st.floats(0, 1)) < bad_rate else draw(good) for _ in range(n)]


@contextlib.contextmanager
def element_path():
    """The element-by-element path: no generator hands out columns, interleave asks for none."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(generator_module, "column_converter", lambda spec, label: None)
        mp.setattr(SlotCycle, "stacks_rows", False)
        yield


def run(dataset, limit=10_000) -> list:
    """Every batch, or the error raised in its place (type and message), to the end."""
    out = []
    it = iter(dataset)
    while len(out) < limit:
        try:
            out.append(next(it))
        except StopIteration:
            break
        except Exception as e:  # noqa: BLE001 - compared between the two paths
            out.append((type(e), str(e)))
    it.close()
    return out


def assert_same_runs(got, expected):
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        if isinstance(e, tuple) and len(e) == 2 and isinstance(e[0], type):
            assert g == e, f"item {i}: {g!r} != {e!r}"
        else:
            assert same(g, e), f"batch {i}: {g!r} != {e!r}"


# ------------------------------------------------------------------------------------------ the converter
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_columns_equal_the_stacked_value_by_value_elements(data):
    spec = data.draw(signatures())
    n = data.draw(st.integers(1, 12))
    values = data.draw(rows_for(spec, n, data.draw(st.sampled_from([0.0, 0.0, 0.2]))))
    columns = column_converter(spec, "g")
    if columns is None:
        assert "s" in spec  # only a shaped leaf keeps a signature off the column path
        return
    try:
        got = columns(values)
    except Exception:  # noqa: BLE001 - a block it cannot take goes value by value
        got = None
    convert = converter(spec, "g")
    expected = []
    for v in values:
        try:
            expected.append(convert(v))
        except Exception as e:  # noqa: BLE001
            expected.append(e)
    if got is None:
        return
    assert not any(isinstance(e, Exception) for e in expected), "the column path took a block with a bad value"
    assert same(got, stack_fast(expected, "batch"))


def test_the_rows_a_port_yields_go_as_columns():
    spec = {"id": leaf(np.int64), "label": leaf(np.int32), "score": leaf(np.float32), "text": leaf(object)}
    rows = [{"text": f"r{i}", "score": i / 3, "label": i % 7, "id": i} for i in range(50)]
    got = column_converter(spec, "g")(rows)
    assert list(got) == ["id", "label", "score", "text"]  # the signature's order, as the elements have
    assert got["label"].dtype == np.int32 and got["text"][3] == b"r3" and got["text"].dtype == object


# ------------------------------------------------------------------------------------------ pipelines
def generator_of(files):
    def gen(i):
        yield from files[int(i)]

    return gen


def interleaved(spec, files, cycle, block, npc, batch, drop=False):
    gen = generator_of(files)
    inner = lambda i: Dataset.from_generator(gen, args=(i,), output_signature=spec, replayable=True)  # noqa: E731
    return (Dataset.range(len(files)).interleave(inner, cycle_length=cycle, block_length=block,
                                                 num_parallel_calls=npc)
            .batch(batch, drop_remainder=drop))


def single(spec, values, batch, drop=False):
    return Dataset.from_generator(lambda: iter(values), output_signature=spec,
                                  replayable=True).batch(batch, drop_remainder=drop)


def p6_spec():
    return {"id": leaf(np.int64), "label": leaf(np.int32), "score": leaf(np.float32), "weight": leaf(np.float64),
            "text": leaf(object)}


def p6_rows(n, seed):
    return [{"id": seed * 1000 + i, "label": i % 5, "score": i / 7, "weight": i * 0.5, "text": f"t{seed}-{i}"}
            for i in range(n)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_interleaved_generators_batch_as_the_element_path_does(data):
    spec = data.draw(signatures())
    n_files = data.draw(st.integers(1, 5))
    bad = data.draw(st.sampled_from([0.0, 0.0, 0.01, 0.05]))
    files = [data.draw(rows_for(spec, data.draw(st.integers(0, 70)), bad)) for _ in range(n_files)]
    cycle, block = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 3))
    npc = data.draw(st.sampled_from([None, None, 2])) if cycle >= 2 else None
    batch, drop = data.draw(st.sampled_from([1, 4, 7, 12, 32])), data.draw(st.booleans())
    make = lambda: interleaved(spec, files, cycle, block, npc, batch, drop)  # noqa: E731
    with element_path():
        expected = run(make())
    assert_same_runs(run(make()), expected)
    assert_same_runs(run(make().ignore_errors()), [b for b in expected if not isinstance(b, tuple) or
                                                   not isinstance(b[0], type)])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_one_generator_batches_as_the_element_path_does(data):
    spec = data.draw(signatures())
    values = data.draw(rows_for(spec, data.draw(st.integers(0, 90)), data.draw(st.sampled_from([0.0, 0.02, 0.1]))))
    batch, drop = data.draw(st.integers(1, 40)), data.draw(st.booleans())
    with element_path():
        expected = run(single(spec, values, batch, drop))
    assert_same_runs(run(single(spec, values, batch, drop)), expected)


def test_generator_error_after_rows_comes_in_place():
    def gen():
        yield from p6_rows(10, 1)
        raise ValueError("boom")

    def make():
        return Dataset.from_generator(gen, output_signature=p6_spec()).batch(4)

    with element_path():
        expected = run(make())
    got = run(make())
    assert_same_runs(got, expected)
    assert [len(b["id"]) for b in got[:2]] == [4, 4] and "boom" in got[2][1]


def test_bad_value_mid_block_stands_where_it_stood():
    rows = p6_rows(40, 2)
    rows[13]["label"] = 2**40  # int32 cannot hold it
    rows[29]["text"] = 7  # not a string

    def make():
        return Dataset.from_tensor_slices([0, 1]).interleave(
            lambda i: Dataset.from_generator(generator_of([rows, p6_rows(40, 3)]), args=(i,),
                                             output_signature=p6_spec()), cycle_length=2).batch(8)

    with element_path():
        expected = run(make())
    got = run(make())
    assert_same_runs(got, expected)
    assert sum(isinstance(b, tuple) for b in got) == 2


# ------------------------------------------------------------------------------------------ resume
@pytest.mark.parametrize("columns", [True, False])
@pytest.mark.parametrize("npc", [None, 2])
def test_interleaved_generators_resume_everywhere(npc, columns):
    """Also the element path's: a state saved while the generator held a bad value's error, not raised yet,
    lost that error (the value counted as converted), so a resumed batch held rows the original dropped."""
    files = [p6_rows(23, s) for s in range(5)]
    files[1][7]["score"] = "bad"  # an error mid-block, batched in its place
    make = lambda: interleaved(p6_spec(), files, 3, 1, npc, 5)  # noqa: E731
    with element_path():
        expected = run(make())
    with element_path() if not columns else contextlib.nullcontext():
        got = assert_resumes_everywhere(lambda: make().ignore_errors(), label="interleaved generators")
    assert_same_runs(got, [b for b in expected if not isinstance(b, tuple)])


def test_a_generator_error_not_raised_yet_survives_a_resume():
    def gen():
        yield from p6_rows(9, 5)
        raise ValueError("boom")

    def make():
        return Dataset.from_generator(gen, output_signature=p6_spec(), replayable=True).batch(4).ignore_errors()

    got = assert_resumes_everywhere(make, label="generator raising")
    assert [len(b["id"]) for b in got] == [4, 4]  # the last batch (row 8, then the error) is dropped


def test_one_generator_resumes_everywhere():
    values = p6_rows(37, 4)
    values[20]["id"] = None
    got = assert_resumes_everywhere(lambda: single(p6_spec(), values, 6).ignore_errors(), label="generator")
    with element_path():
        expected = run(single(p6_spec(), values, 6).ignore_errors())
    assert_same_runs(got, expected)


# ------------------------------------------------------------------------------------------ the mechanism
def test_batches_of_interleaved_generators_are_not_restacked(monkeypatch):
    """After the first batch (read element by element while the slots open) every batch of P6's shape is
    woven from columns: no per-row element is stacked by the batch."""
    stacked = []
    original = batch_module.stack_fast
    monkeypatch.setattr(batch_module, "stack_fast", lambda elements, what: stacked.append(len(elements)) or
                        original(elements, what))
    files = [p6_rows(600, s) for s in range(4)]
    got = run(interleaved(p6_spec(), files, 4, 1, None, 64))
    assert len(got) == 38 and sum(stacked) <= 64 + 2 * 64  # the first batch, and the tail's visits
    with element_path():
        assert_same_runs(got, run(interleaved(p6_spec(), files, 4, 1, None, 64)))


def test_statistics_count_the_rows_that_went_as_columns():
    options = Options()
    options.experimental_statistics = True
    files = [p6_rows(100, s) for s in range(3)]

    def counts():
        it = iter(interleaved(p6_spec(), files, 3, 1, None, 10).with_options(options))
        list(it)
        return [(row["kind"], row["elements"]) for row in it.stats().rows]

    with element_path():
        expected = counts()
    assert counts() == expected
    assert ("Generator", 100) in expected
