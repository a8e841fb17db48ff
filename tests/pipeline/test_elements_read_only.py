"""Elements that jaxfeed hands out and also keeps are read-only: a function that writes into its element in
place raises instead of changing the source for every later epoch.

A bug: ``from_tensor_slices`` handed out views of the user's arrays, ``from_tensors`` the user's array itself
and an in-memory ``cache`` the very arrays it replays; a map written numpy-style (``x *= 2``) changed the
user's data, and the second epoch saw the first epoch's change (twice the change, the epoch after)."""

import numpy as np
import pytest

from jaxfeed.pipeline import Dataset, structure


def doubles_in_place(element):
    for leaf in structure.flatten(element):
        leaf *= 2
    return element


def values(ds):
    return [[np.asarray(x).tolist() for x in structure.flatten(e)] for e in ds]


MAKERS = pytest.mark.parametrize("make", [
    lambda a: Dataset.from_tensor_slices(a),
    lambda a: Dataset.from_tensor_slices({"x": a, "y": (a, a[:, :1])}),
    lambda a: Dataset.from_tensors(a),
    lambda a: Dataset.from_tensor_slices(a).map(lambda x: x + 0).cache(),  # fresh arrays, kept by the cache
], ids=["slices", "slices-dict", "tensors", "cache"])


def made(make):
    """The source array, a copy of it, ``make(source)`` and its first epoch's values."""
    source = np.arange(12, dtype=np.int64).reshape(4, 3)
    ds = make(source)
    return source, source.copy(), ds, values(ds)


@MAKERS
def test_writing_into_an_element_in_place_raises_and_changes_nothing(make):
    source, keep, ds, want = made(make)
    with pytest.raises(ValueError, match="read-only"):
        for x in ds:
            doubles_in_place(x)  # the user's loop
    assert values(ds) == want  # every later epoch as the first
    assert np.array_equal(source, keep)
    assert source.flags.writeable  # the user's array is left as it was (only views are read-only)


@MAKERS
def test_a_map_that_writes_in_place_never_changes_a_later_epoch(make):
    source, keep, ds, want = made(make)
    try:  # (where the map's input is a copy -- a gather from the source -- it works on the copy)
        list(ds.map(doubles_in_place))
    except ValueError as e:
        assert "read-only" in str(e)
    assert values(ds) == want
    assert np.array_equal(source, keep)


def test_a_function_that_copies_first_may_change_its_copy():
    ds = Dataset.from_tensor_slices(np.ones((3, 2), np.float32)).map(lambda x: doubles_in_place(x.copy()))
    assert values(ds) == [[[2.0, 2.0]]] * 3
    assert values(ds) == [[[2.0, 2.0]]] * 3


def test_a_cache_restored_from_a_checkpoint_replays_read_only_elements():
    ds = Dataset.from_tensor_slices(np.arange(6).reshape(3, 2)).map(lambda x: x + 1).cache()
    list(ds)  # recorded
    it = iter(ds)
    next(it)
    state = it.get_state()
    again = iter(ds)
    again.set_state(state)
    x = next(again)
    with pytest.raises(ValueError, match="read-only"):
        x += 1
    assert np.asarray(x).tolist() == [3, 4]


_CONSTANT = np.asfortranarray(np.arange(6.0).reshape(2, 3))
_CONSTANT.flags.writeable = False


def the_constant(x):
    return _CONSTANT  # shared with this module: the map takes a copy of it


@pytest.mark.parametrize("way", ["c", "python"])
def test_a_result_the_map_copies_keeps_its_writability_and_layout(monkeypatch, way):
    """A map copies a result that something else also holds (so that later changes to it cannot reach the
    element); the copy of a read-only Fortran-order array was writable and C order, where the same function's
    fresh results (kept, the C way; the Python way copies every array) were neither."""
    from jaxfeed.pipeline.engine import blocks

    if way == "python":
        monkeypatch.setattr(blocks, "call_taken", blocks._call_taken_py)
        monkeypatch.setattr(blocks, "taken", blocks._taken_py)
    elif blocks.taken is blocks._taken_py:
        pytest.skip("the C extension is not built")
    for ds in (Dataset.range(3).map(the_constant), Dataset.range(3).map(the_constant, num_parallel_calls=2)):
        got = list(ds)
        assert all(not e.flags.writeable for e in got) and all(e is not _CONSTANT for e in got)
        assert all(e.flags.f_contiguous and not e.flags.c_contiguous for e in got)
        assert values(ds) == [[_CONSTANT.tolist()]] * 3
