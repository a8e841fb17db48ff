"""The fused map+batch stacks flat tuples of plain results without normalising them first, and
normalize_results checks flat tuples a column at a time: both must give exactly what the element-by-element
way gives (issue 19)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxfeed.pipeline import Dataset, structure
from jaxfeed.pipeline.engine import blocks
from jaxfeed.pipeline.iterators.batch import stack_fast
from jaxfeed.pipeline.iterators.map_batch import _as_batch

LEAVES = {
    "u8_array": st.lists(st.integers(0, 255), min_size=3, max_size=3).map(lambda v: np.array(v, np.uint8)),
    "f32_array2": st.lists(st.floats(width=32), min_size=2, max_size=2).map(lambda v: np.array(v, np.float32)),
    "ragged": st.lists(st.integers(0, 9), max_size=3).map(lambda v: np.array(v, np.int64)),
    "np_int64": st.integers(-2**63, 2**63 - 1).map(np.int64),
    "np_float32": st.floats(width=32).map(np.float32),
    "bytes": st.binary(max_size=4),
    "str": st.text(max_size=3),
    "int": st.integers(-5, 5),
    "str_array": st.lists(st.text(max_size=2), min_size=1, max_size=2).map(np.array),
    "np_str": st.text(max_size=2).map(np.str_),
    "none": st.none(),
}


@st.composite
def tuple_results(draw):
    n = draw(st.integers(1, 8))
    width = draw(st.integers(0, 3))
    uniform = draw(st.booleans())
    columns = []
    for _ in range(width):
        if uniform:
            kind = LEAVES[draw(st.sampled_from(sorted(LEAVES)))]
            columns.append([draw(kind) for _ in range(n)])
        else:
            columns.append([draw(st.one_of(*LEAVES.values())) for _ in range(n)])
    results = [tuple(row) for row in zip(*columns)] if width else [() for _ in range(n)]
    if draw(st.integers(0, 6)) == 0:  # a result of another shape
        results[draw(st.integers(0, n - 1))] = draw(st.sampled_from([None, [1, 2], (np.int64(1),) * (width + 1)]))
    return results


def old_plain_tuples(out):
    return all(type(o) is tuple and all(map(blocks._plain, o)) for o in out)


def same_batch(a, b):
    fa, fb = structure.flatten(a), structure.flatten(b)
    return type(a) is type(b) and len(fa) == len(fb) and all(
        type(x) is type(y) and x.dtype == y.dtype and x.shape == y.shape and
        np.array_equal(x, y, equal_nan=x.dtype.kind == "f") for x, y in zip(fa, fb))


@settings(max_examples=300, deadline=None)
@given(tuple_results())
def test_plain_tuples_check_equals_the_per_leaf_check(results):
    if type(results[0]) is not tuple:
        return
    if blocks._plain_tuples(results):
        assert old_plain_tuples(results)
    elif old_plain_tuples(results):  # (tuples of different lengths: the slow way, same elements)
        assert len(set(map(len, results))) > 1


@settings(max_examples=300, deadline=None)
@given(tuple_results())
def test_fused_batch_of_tuples_equals_normalise_then_stack(results):
    def slow():
        elements, bad = blocks.normalize_results(list(results), "map", 0)
        if bad:
            return None, "bad"
        return stack_fast(elements, "batch"), None

    try:
        expected = slow()
    except Exception as e:  # noqa: BLE001 - stacking refused them: so must the fast way
        expected = e
    try:
        got = _as_batch(list(results), False, "map", "batch", 0)
    except Exception as e:  # noqa: BLE001
        got = e
    if isinstance(expected, Exception):
        # rows that do not stack go to the carry as rows, whose batch raises the same error (saved as rows by
        # get_state, where a raise from a worker's block would have escaped from it)
        assert not isinstance(got, Exception) and got[0] is None
        with pytest.raises(type(expected)):
            stack_fast(got[1], "batch")
        return
    assert not isinstance(got, Exception), got
    if expected[0] is None:
        assert got[0] is None
        return
    assert same_batch(got[0], expected[0])


def test_a_parse_like_map_batches_the_same_fused_or_not():
    records = [bytes([i % 251]) * 5 for i in range(40)]

    def parse(r):
        a = np.frombuffer(r, np.uint8)
        return a, a.sum(dtype=np.int64)

    fused = list(Dataset.from_tensor_slices(records).map(parse).batch(16))
    plain = Dataset.from_tensor_slices(records).map(parse).batch(16)
    options = plain.options()
    options.experimental_optimization.apply_default_optimizations = False
    unfused = list(plain.with_options(options))
    assert len(fused) == len(unfused) == 3
    for a, b in zip(fused, unfused):
        assert same_batch(a, b)
