"""from_generator's block conversion and batch's flat-column stacking are fast paths: whatever they return
must equal the value-by-value path exactly (types, dtypes, values, key order), and a block they do not
take goes value by value, errors in their place (issue 19)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxfeed.pipeline import Dataset, TensorSpec, errors, structure
from jaxfeed.pipeline.iterators.batch import stack_fast
from jaxfeed.pipeline.iterators.generator_convert import Mismatch, block_converter, converter
from jaxfeed.pipeline.testing import assert_resumes_everywhere

from node_test_helpers import same

DTYPES = [np.int8, np.int32, np.int64, np.uint8, np.uint64, np.float16, np.float32, np.float64, np.bool_,
          np.complex64, object]

# values of one kind each: a block of one kind is what the fast path takes
KINDS = {
    "int": st.integers(-300, 300),
    "bigint": st.integers(-2**70, 2**70),
    "float": st.floats(allow_nan=True, allow_infinity=True),
    "hugefloat": st.sampled_from([1e300, -1e300, 3.4e38, 1e39, 0.5, 2.0]),
    "bool": st.booleans(),
    "str": st.text(max_size=5),
    "bytes": st.binary(max_size=5),
    "np_int64": st.integers(-2**63, 2**63 - 1).map(np.int64),
    "np_int32": st.integers(-2**31, 2**31 - 1).map(np.int32),
    "np_float64": st.floats(allow_nan=True).map(np.float64),
    "np_float32": st.floats(width=32, allow_nan=True).map(np.float32),
    "array": st.lists(st.integers(0, 9), min_size=0, max_size=3).map(lambda v: np.array(v, np.int64)),
    "none": st.none(),
}
ANY_VALUE = st.one_of(*KINDS.values())


def leaf_specs():
    return st.builds(lambda dt, shape: TensorSpec(shape, dt), st.sampled_from(DTYPES),
                     st.sampled_from([(), (), None, (None,), (2,)]))


def signatures():
    leaf = leaf_specs()
    flat_tuple = st.lists(leaf, min_size=1, max_size=3).map(tuple)
    flat_dict = st.dictionaries(st.sampled_from(["a", "b", "c", "text"]), leaf, min_size=1, max_size=3)
    nested = st.builds(lambda d, t: {**d, "t": t}, flat_dict, flat_tuple)
    return st.one_of(leaf, flat_tuple, flat_dict, nested)


@st.composite
def values_for(draw, spec, n, uniform):
    """``n`` values shaped like ``spec``; with ``uniform`` each leaf's values are of one kind (the fast
    path's case), else any mix. Sometimes a structure is broken (a missing or extra key, a list)."""
    if isinstance(spec, tuple):
        columns = [draw(values_for(s, n, uniform)) for s in spec]
        rows = [tuple(r) for r in zip(*columns)]
    elif isinstance(spec, dict):
        columns = {k: draw(values_for(s, n, uniform)) for k, s in spec.items()}
        order = list(spec)
        if draw(st.booleans()):
            order = order[::-1]  # another insertion order: the elements still come in the signature's
        rows = [{k: columns[k][i] for k in order} for i in range(n)]
    else:
        kind = st.sampled_from(list(KINDS)).map(KINDS.get) if uniform else st.just(ANY_VALUE)
        strategy = draw(kind)
        return [draw(strategy) for _ in range(n)]
    if draw(st.integers(0, 9)) == 0:  # a broken structure somewhere
        i = draw(st.integers(0, n - 1))
        row = rows[i]
        if isinstance(row, dict):
            rows[i] = {**row, "extra": 1} if draw(st.booleans()) else {k: row[k] for k in list(row)[1:]}
        else:
            rows[i] = list(row)
    return rows


def one_by_one(spec, values):
    """Each value through ``converter``: its element, or the exception it raises."""
    convert = converter(spec, "from_generator")
    out = []
    for v in values:
        try:
            out.append(convert(v))
        except Exception as e:  # noqa: BLE001 - compared with the fast path's
            out.append(e)
    return out


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_block_conversion_equals_value_by_value(data):
    spec = data.draw(signatures())
    n = data.draw(st.integers(1, 12))
    values = data.draw(values_for(spec, n, uniform=data.draw(st.booleans())))
    expected = one_by_one(spec, values)
    try:
        got = block_converter(spec, "from_generator")(values)
    except Exception:  # noqa: BLE001 - a block the fast path does not take goes value by value
        got = None
    if got is None:
        return
    assert len(got) == len(values)
    for g, e in zip(got, expected):
        assert not isinstance(e, Exception), f"the fast path took a block with a bad value: {e!r}"
        assert same(g, e), (g, e)


def test_block_conversion_takes_the_common_rows():
    """The fast path does apply to the rows a port yields (Python values, numpy values)."""
    spec = {"id": TensorSpec((), np.int64), "label": TensorSpec((), np.int32), "score": TensorSpec((), np.float32),
            "text": TensorSpec((), object)}
    rows = [{"id": i, "label": i % 7, "score": i / 3, "text": f"row {i}"} for i in range(300)]
    got = block_converter(spec, "g")(rows)
    assert got is not None and all(same(g, e) for g, e in zip(got, one_by_one(spec, rows)))
    assert type(got[5]["score"]) is np.float32 and got[5]["text"] == b"row 5"
    pairs = [(np.int64(i), np.arange(3, dtype=np.float32)) for i in range(10)]
    tspec = (TensorSpec((), np.int64), TensorSpec((3,), np.float32))
    assert block_converter(tspec, "g")(pairs) is not None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_generator_delivers_each_value_or_its_error_in_place(data):
    """The iterator (blocks, pending values after an error) gives what converting value by value gives:
    each element, or an InvalidArgumentError where the value was bad, and the rest after it."""
    spec = data.draw(signatures())
    n = data.draw(st.integers(1, 40))
    values = data.draw(values_for(spec, n, uniform=data.draw(st.booleans())))
    expected = one_by_one(spec, values)
    if any(not isinstance(e, (errors.InvalidArgumentError, Mismatch)) for e in expected if isinstance(e, Exception)):
        return  # a conversion that broke in Python ends the generator (a case of its own, tested below)
    it = iter(Dataset.from_generator(lambda: iter(values), output_signature=spec))
    got = []
    while True:
        try:
            got.append(next(it))
        except StopIteration:
            break
        except errors.InvalidArgumentError as e:
            got.append(e)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        if isinstance(e, Exception):
            assert isinstance(g, errors.InvalidArgumentError), (g, e)
            if isinstance(e, errors.InvalidArgumentError):
                assert str(g).endswith(str(e).split("from_generator", 1)[1]), (g, e)  # labels differ
        else:
            assert same(g, e), (g, e)


def test_generator_error_comes_after_the_values_before_it_and_a_bad_value():
    def gen():
        yield from [1, 2, "x", 4]
        raise ValueError("boom")

    it = iter(Dataset.from_generator(gen, output_signature=TensorSpec((), np.int64)))
    assert [next(it), next(it)] == [1, 2]
    with pytest.raises(errors.InvalidArgumentError, match="int64"):
        next(it)
    assert next(it) == 4
    with pytest.raises(errors.InvalidArgumentError, match="(?s)ValueError: boom.*after 4 elements"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)


def test_a_conversion_that_breaks_in_python_ends_the_generator_as_before():
    values = ["a", "\ud800", "b"]  # a lone surrogate cannot be encoded
    it = iter(Dataset.from_generator(lambda: iter(values), output_signature=TensorSpec((), object)))
    assert next(it) == b"a"
    with pytest.raises(errors.InvalidArgumentError, match="(?s)UnicodeEncodeError.*after 2 elements"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)


def test_resumes_everywhere_with_bad_values_pending():
    values = [1, 2, "x", 4, 2**40, 6, 7, None, 9] * 3

    def make():
        return Dataset.from_generator(lambda: iter(values), output_signature=TensorSpec((), np.int32),
                                      replayable=True).ignore_errors()

    out = assert_resumes_everywhere(make)
    assert [int(x) for x in out] == [v for v in values if type(v) is int and v < 2**31]
    assert all(type(x) is np.int32 for x in out)


# ------------------------------------------------------------------------------------------------- batch
def leaf_values(kind, n):
    return st.lists(KINDS[kind], min_size=n, max_size=n)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_stack_fast_equals_stack_for_flat_tuples_and_dicts(data):
    n = data.draw(st.integers(1, 10))
    kinds = data.draw(st.lists(st.sampled_from(["np_int64", "np_int32", "np_float32", "bytes", "array", "str",
                                                "int"]), min_size=1, max_size=4))
    columns = [data.draw(leaf_values(k, n)) for k in kinds]
    if data.draw(st.booleans()):
        keys = data.draw(st.permutations(["a", "b", "c", "d"]))[:len(kinds)]
        elements = [dict(zip(keys, row)) for row in zip(*columns)]
        if data.draw(st.integers(0, 4)) == 0:  # one element with another key set (same count)
            i = data.draw(st.integers(0, n - 1))
            elements[i] = dict(zip(["z"] + list(keys[1:]), elements[i].values()))
    else:
        elements = [tuple(row) for row in zip(*columns)]
    try:
        expected = structure.stack(elements, what="batch")
    except Exception as e:  # noqa: BLE001
        with pytest.raises(type(e)):
            stack_fast(elements, "batch")
        return
    got = stack_fast(elements, "batch")
    assert same(got, expected) if not isinstance(got, dict) else list(got) == list(expected)
    for g, e in zip(structure.flatten(got), structure.flatten(expected)):
        assert g.dtype == e.dtype and g.shape == e.shape and np.array_equal(g, e, equal_nan=g.dtype.kind == "f")
