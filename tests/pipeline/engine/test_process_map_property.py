"""The process map (and the thread map) against the plain map, on random elements: whatever crosses -- big arrays through the slabs
both ways, small ones and strings pickled, dicts, tuples, byte orders, read-only inputs -- and whatever happens
-- errors at random elements, ``ignore_errors``, a batch after it, a checkpoint taken anywhere -- every outcome
is the one the sequential map gives: the same values, dtypes, shapes, leaf types and errors, in order."""

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxfeed.pipeline import Dataset
from jaxfeed.pipeline.checkpoint.format import deserialize, serialize
from jaxfeed.pipeline.testing import outcomes

pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="POSIX shared memory in /dev/shm")

DTYPES = ["u1", "<i8", ">i4", "<f4", ">f8", "?", "<c8"]


def work(element):
    """The mapped function (module-level: one pool serves every example). Fails where the element says so;
    otherwise changes every array leaf without changing its dtype, and returns some leaves as they came."""
    if int(element["fail"]):
        raise ValueError(f"element {int(element['i'])} fails")
    out = {"i": element["i"], "same": element["big"]}  # an input returned whole: a view of the input slab?
    big = element["big"]
    out["big"] = big[::-1].copy() if big.dtype.kind in "b" else big + big.dtype.type(1)
    out["small"] = (element["small"] * 2, element["text"])
    if element["big"].size % 2:
        out["scalar"] = element["i"] * 3  # a numpy scalar result
    else:
        out["scalar"] = np.int64(int(element["i"]) * 3)
    return out


def read(ds, limit=200):
    """``outcomes`` of a fresh iterator, errors by type and message (their notes name the map's arguments and,
    from a worker, carry its traceback)."""
    got, ended = outcomes(iter(ds), limit)
    return [o[:3] for o in got], ended


def leaf_types(element):
    from jaxfeed.pipeline import structure

    return [(type(x).__name__, getattr(x, "flags", None) and x.flags.writeable) for x in structure.flatten(element)]


@st.composite
def datasets(draw):
    n = draw(st.integers(1, 40))
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    shape = tuple(draw(st.lists(st.integers(1, 24), min_size=1, max_size=3)))
    big_rows = max(1, 8192 // max(1, dtype.itemsize * int(np.prod(shape))))  # big enough for a slab, often
    shape = (shape[0] * draw(st.sampled_from([1, big_rows])),) + shape[1:]
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    big = rng.integers(0, 100, (n,) + shape).astype(dtype)
    fails = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    columns = {"i": np.arange(n, dtype=np.int64), "big": big, "small": rng.random((n, 3)).astype(np.float32),
               "text": np.array([b"x" * int(k) for k in rng.integers(0, 9, n)], dtype=object),
               "fail": np.array(fails, dtype=np.int8)}
    if draw(st.booleans()):
        columns["big"].flags.writeable = False
    options = draw(st.fixed_dictionaries({
        "ignore_errors": st.booleans(), "batch": st.sampled_from([None, 1, 3, 8]),
        "drop_remainder": st.booleans(), "workers": st.sampled_from([1, 2]), "checkpoint_at": st.integers(0, 45)}))
    return columns, options


def build(columns, options, executor):
    ds = Dataset.from_tensor_slices(columns)
    ds = ds.map(work, num_parallel_calls=options["workers"], executor=executor) if executor else ds.map(work)
    if options["ignore_errors"]:
        ds = ds.ignore_errors()
    if options["batch"]:
        ds = ds.batch(options["batch"], drop_remainder=options["drop_remainder"])
    return ds


@pytest.mark.parametrize("executor", ["process", "thread"])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=datasets())
def test_a_parallel_map_gives_what_the_sequential_map_gives(executor, case):
    columns, options = case
    want, ended = read(build(columns, options, None))
    assert ended
    got, ended = read(build(columns, options, executor))
    assert ended and got == want
    mine = [e for e in build(columns, options, executor).ignore_errors()]
    theirs = [e for e in build(columns, options, None).ignore_errors()]
    assert [leaf_types(e) for e in mine] == [leaf_types(e) for e in theirs]

    # a checkpoint anywhere: the outcomes read before it and those after restoring are the uninterrupted run's
    k = min(options["checkpoint_at"], len(want))
    it = iter(build(columns, options, executor))
    before = [o[:3] for o in outcomes(it, k)[0]]
    state = deserialize(serialize(it.get_state()))
    it.close()
    again = iter(build(columns, options, executor))
    again.set_state(state)
    after, ended = outcomes(again, 200)
    assert ended and before + [o[:3] for o in after] == want
