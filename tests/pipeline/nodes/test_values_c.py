"""The optional C passes of ``from_generator``'s dict and tuple rows into columns (``pipeline/_values_c.c``)
against the Python way they replace: the same columns, or the same refusal (the block then goes value by value), for
every block; no reference leaked or lost; the Python way still chosen where the extension is off.

Skipped where the extension is not built. The Python way is selected by setting
``generator_convert._c_dict_columns`` and ``_c_tuple_columns`` to None (what ``JAXFEED_NO_C_EXT=1`` does at
import)."""

import collections
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxfeed.pipeline.iterators import generator_convert

from node_test_helpers import recording_addresses, same
from jaxfeed.pipeline import Dataset
from jaxfeed.pipeline.testing import assert_resumes_everywhere

from test_generator_columns import SCALAR_DTYPES, leaf, p6_rows, p6_spec, rows_for, run, signatures, single

_c = pytest.importorskip("jaxfeed.pipeline._values_c", reason="the C extension is not built")

C_PASS = _c.dict_columns
C_TUPLES = _c.tuple_columns
Pair = collections.namedtuple("Pair", "a b")


def outcome(spec, values, native, way=generator_convert.column_converter):
    """What the column way (or ``way=block_converter``: the block way of ``next_many``) makes of a block: its
    columns (elements), or "not taken" (None, or an exception: the generator then goes value by value)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(generator_convert, "_c_dict_columns", C_PASS if native else None)
        mp.setattr(generator_convert, "_c_tuple_columns", C_TUPLES if native else None)
        convert = way(spec, "g")
    try:
        got = convert(values)
    except Exception:  # noqa: BLE001
        return "not taken"
    return "not taken" if got is None else got


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_the_c_pass_takes_exactly_the_blocks_the_python_way_takes_and_gives_the_same_result(data):
    spec = data.draw(signatures().filter(lambda s: isinstance(s, (dict, tuple)) and "s" not in s))
    values = data.draw(rows_for(spec, data.draw(st.integers(1, 12)), data.draw(st.sampled_from([0.0, 0.0, 0.2]))))
    if data.draw(st.booleans()):  # rows of another kind: a subclass, a key or an item too few, a list
        i = data.draw(st.integers(0, len(values) - 1))
        row = values[i]
        values[i] = data.draw(st.sampled_from(
            [collections.OrderedDict(row), dict(list(row.items())[1:]), (1, 2)] if isinstance(row, dict) else
            [list(row), row[1:], row + (1,), Pair(1, 2), {"a": 1}]))
    for way in (generator_convert.column_converter, generator_convert.block_converter):
        python = outcome(spec, values, False, way)
        native = outcome(spec, values, True, way)
        assert (python == "not taken") == (native == "not taken"), way
        if python != "not taken":
            assert same(native, python)
            assert type(native) is type(python)


def test_plain_dict_rows_come_apart_into_one_list_per_key():
    rows = [{"b": i, "a": f"s{i}"} for i in range(5)]
    assert C_PASS(rows, ("a", "b")) == [[f"s{i}" for i in range(5)], list(range(5))]


@pytest.mark.parametrize("rows", [
    [{"a": 1, "b": 2}, collections.OrderedDict(a=1, b=2)],  # a dict subclass: the value way's isinstance
    [{"a": 1, "b": 2}, {"a": 1}],  # a key missing
    [{"a": 1, "b": 2}, {"a": 1, "b": 2, "c": 3}],  # a key extra
    [{"a": 1, "b": 2}, {"a": 1, "c": 2}],  # one missing and one extra: the size alone is not enough
    [{"a": 1, "b": 2}, {"a": 1.0, "b": 2}],  # a column of mixed types
    [{"a": True, "b": 2}, {"a": 1, "b": 2}],  # bool is not int
    [{"a": 1, "b": 2}, (1, 2)],
    [],
])
def test_blocks_the_column_way_does_not_take_are_refused(rows):
    assert C_PASS(rows, ("a", "b")) is None


def test_tuple_rows_come_apart_into_one_list_per_position():
    assert C_TUPLES([(1, "x"), (2, "y")], 2) == [[1, 2], ["x", "y"]]
    assert C_TUPLES([Pair(1, "x"), Pair(2, "y")], 2) == [[1, 2], ["x", "y"]]


@pytest.mark.parametrize("rows", [
    [(1, 2), Pair(1, 2)],  # not all of the first row's type
    [Pair(1, 2), (1, 2)],
    [(1, 2), (1,)],
    [(1, 2), (1, 2, 3)],
    [(1, 2), (1.0, 2)],  # a position of mixed types
    [(1, 2), [1, 2]],
    [[1, 2], [1, 2]],  # lists are not rows of a tuple signature
    [],
])
def test_tuple_blocks_the_column_way_does_not_take_are_refused(rows):
    assert C_TUPLES(rows, 2) is None


def test_an_error_a_key_lookup_raises_propagates():
    class Raising:
        def __hash__(self):
            return hash("a")

        def __eq__(self, other):
            raise RuntimeError("eq boom")

    with pytest.raises(RuntimeError, match="eq boom"):
        C_PASS([{Raising(): 1, "b": 2}], ("a", "b"))


def test_no_reference_is_leaked_or_lost():
    value, key = object(), "k"
    rows = [{key: value, "n": i} for i in range(100)]
    before = sys.getrefcount(value)
    for _ in range(1000):
        columns = C_PASS(rows, (key, "n"))
        assert sys.getrefcount(value) == before + 100
        del columns
        assert C_PASS(rows + [{key: value, "n": 1.5}], (key, "n")) is None  # given up half-way
    assert sys.getrefcount(value) == before
    rows = [(value, i) for i in range(100)]
    before = sys.getrefcount(value)
    for _ in range(1000):
        columns = C_TUPLES(rows, 2)
        assert sys.getrefcount(value) == before + 100
        del columns
        assert C_TUPLES(rows + [(value, 1.5)], 2) is None
    assert sys.getrefcount(value) == before


def test_the_converter_uses_the_extension_by_default():
    assert (generator_convert._c_dict_columns is C_PASS and generator_convert._c_tuple_columns is C_TUPLES) or \
        os.environ.get("JAXFEED_NO_C_EXT", "") not in ("", "0")


def test_the_environment_variable_forces_the_python_way():
    code = ("from jaxfeed.pipeline.iterators import generator_convert as g; "
            "print(g._c_dict_columns is None and g._c_tuple_columns is None)")
    env = dict(os.environ, JAXFEED_NO_C_EXT="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


@pytest.mark.parametrize("c_pass", [C_PASS, None])
def test_a_generator_of_dict_rows_batches_alike_either_way(c_pass, monkeypatch):
    monkeypatch.setattr(generator_convert, "_c_dict_columns", c_pass)
    rows = p6_rows(300, 4)
    rows[77]["label"] = 2**40  # int32 cannot hold it: that batch fails in its place
    got = run(single(p6_spec(), rows, 64))
    assert [len(b["id"]) if isinstance(b, dict) else b[0].__name__ for b in got] == [
        64, "InvalidArgumentError", 64, 64, 64, 30]  # (the next batch starts after the bad row, as tf.data)
    monkeypatch.setattr(generator_convert, "_c_dict_columns", None if c_pass else C_PASS)
    other = run(single(p6_spec(), rows, 64))
    assert len(got) == len(other)
    for g, o in zip(got, other):
        assert same(g, o) if isinstance(o, dict) else g == o
    assert np.array_equal(got[0]["label"], np.arange(64) % 5) and got[0]["label"].dtype == np.int32


def test_a_leaf_signature_is_not_the_c_pass_s():
    # only dict rows go through it: a generator of scalars keeps the Python way's one check per block
    convert = generator_convert.column_converter(leaf(np.int64), "g")
    assert same(convert([1, 2, 3]), np.array([1, 2, 3]))


# ------------------------------------------------------------------------------------------ snapshot
SNAPSHOT = _c.snapshot

leaves = st.one_of(st.integers(), st.floats(allow_nan=False), st.text(max_size=3), st.binary(max_size=3),
                   st.none(), st.booleans(), st.integers(0, 5).map(np.int32),
                   st.lists(st.integers(-9, 9), max_size=4).map(lambda v: np.array(v, np.int64)),
                   st.binary(max_size=3).map(bytearray))
structures = st.recursive(leaves, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.lists(inner, max_size=3).map(tuple),
    st.dictionaries(st.sampled_from("abc"), inner, max_size=3), st.tuples(inner, inner).map(lambda t: Pair(*t))),
    max_leaves=8)


def mutate_everything(value):
    """Change every mutable part of ``value`` in place (what a generator reusing its buffers does)."""
    if isinstance(value, dict):
        for k in list(value):
            mutate_everything(value[k])
            value[k] = "changed"
    elif isinstance(value, list):
        for i, v in enumerate(value):
            mutate_everything(v)
            value[i] = "changed"
    elif isinstance(value, tuple):
        for v in value:
            mutate_everything(v)
    elif isinstance(value, np.ndarray) and value.size:
        value[...] = 77
    elif isinstance(value, bytearray) and value:
        value[0] = 0xFF


def deep_copy(value):
    import copy

    return copy.deepcopy(value)


def same_value(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return type(a) is type(b) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same_value, a, b))
    if isinstance(a, dict):
        return type(a) is type(b) and list(a) == list(b) and all(same_value(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@settings(max_examples=400, deadline=None)
@given(structures)
def test_a_snapshot_keeps_the_value_as_it_was_whatever_the_generator_changes_after(value):
    before = deep_copy(value)
    python = generator_convert._snapshot_py(value)
    native = SNAPSHOT(value)  # (``value`` is held here: shared, so every mutable part is copied)
    assert same_value(native, before) and same_value(python, before)
    mutate_everything(value)
    assert same_value(native, before) and same_value(python, before)


def test_a_value_nothing_else_holds_is_kept_as_it_is():
    made, fresh = recording_addresses()

    def gen():
        for i in range(3):  # a new dict, list and tuple around a new array each time: nothing is copied
            yield {"row": [fresh(np.full(4, i))], "n": (i, "x")}

    got = list(map(SNAPSHOT, gen()))
    assert [g["row"][0].ctypes.data for g in got] == made and [g["n"] for g in got] == [(0, "x"), (1, "x"),
                                                                                        (2, "x")]


def test_views_and_shared_arrays_are_copied():
    base = np.arange(6)
    view = base[2:4]
    got = list(map(SNAPSHOT, iter([view])))[0]
    base[:] = 0
    assert got.tolist() == [2, 3] and got.base is None


def test_a_cycle_is_not_followed_forever():
    d = {}
    d["self"] = d
    for way in (SNAPSHOT, generator_convert._snapshot_py):
        got, depth = way(d), 0
        while got is not d:  # copies down to a fixed depth, then the value itself (the converter raises for it)
            got, depth = got["self"], depth + 1
        assert 0 < depth < 40


# ------------------------------------------------------------------------------------------ pull_dict_columns
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_rows_pulled_and_taken_apart_in_c_batch_as_the_python_way_does(data):
    # a flat dict signature; rows with bad values, extra or missing keys, other kinds of values, a generator
    # that raises part-way: batches and elements, errors in their places and ignore_errors alike with the pull
    # on and off
    spec = data.draw(st.dictionaries(st.sampled_from(["id", "b", "a", "text"]),
                                     st.sampled_from(SCALAR_DTYPES).map(leaf), min_size=1, max_size=4))
    values = data.draw(rows_for(spec, data.draw(st.integers(0, 80)), data.draw(st.sampled_from([0.0, 0.02, 0.1]))))
    if values and data.draw(st.booleans()):
        values[data.draw(st.integers(0, len(values) - 1))] = data.draw(st.sampled_from([None, (1, 2), [1], 5]))
    raise_at = data.draw(st.one_of(st.none(), st.integers(0, len(values))))
    batch, drop = data.draw(st.integers(1, 30)), data.draw(st.booleans())

    def gen():
        for i, v in enumerate(values):
            if i == raise_at:
                raise RuntimeError("generator boom")
            yield v

    def runs():
        elements = Dataset.from_generator(gen, output_signature=spec)
        ds = elements.batch(batch, drop_remainder=drop)
        return run(ds), run(ds.ignore_errors()), run(elements), run(elements.ignore_errors().take(50))

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(generator_convert, "_c_pull_dict_columns", None)
        expected = runs()
    assert generator_convert._c_pull_dict_columns is not None
    for got, want in zip(runs(), expected):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert same(g, w) if isinstance(w, dict) else g == w, (g, w)


def test_rows_pulled_in_c_resume_everywhere():
    rows = p6_rows(40, 3)
    rows[17]["score"] = "bad"
    rows[29] = {"id": 1}  # a row the pull does not take: value by value, in its place

    def make():
        return Dataset.from_generator(lambda: iter(rows), output_signature=p6_spec(), replayable=True) \
            .batch(6).ignore_errors()

    got = assert_resumes_everywhere(make, label="pulled rows")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(generator_convert, "_c_pull_dict_columns", None)
        expected = run(make())
    assert len(got) == len(expected) and all(same(g, w) for g, w in zip(got, expected))


def test_the_pull_stops_at_a_value_that_is_not_a_row_without_resuming_the_generator():
    resumed = []

    def gen():
        yield {"a": 1}
        yield [1]
        resumed.append(True)
        yield {"a": 2}

    it = gen()
    columns, count, one_type, stop, extra = _c.pull_dict_columns(it, 10, ("a",))
    assert (columns, count, one_type, stop, extra) == ([[1]], 1, True, 2, [1]) and resumed == []
    assert _c.pull_dict_columns(it, 10, ("a",))[:4] == ([[2]], 1, True, 1)


def _other(s):
    """An str equal to ``s`` that is another object (as a signature's key is, next to a row's)."""
    out = "".join(list(s))
    assert out == s and (out is not s or len(s) <= 1)
    return out


def test_the_pull_looks_keys_up_by_the_rows_own_key_objects_and_takes_the_same_values():
    """The rows' own key objects stand in for the signature's equal ones (a lookup by pointer, not by a string
    comparison): the same columns, whichever key objects the rows hold, shared or not, and none leaked."""
    names = ("label", "score", "text")
    shared = tuple(_other(k) for k in names)
    rows = [dict(zip(shared, (i, i * 0.5, f"t{i}"))) for i in range(50)]
    rows += [{_other(k): v for k, v in zip(names, (i, i * 0.5, f"t{i}"))} for i in range(50, 60)]  # own keys
    keys = tuple(_other(k) for k in sorted(names))
    expected = [[r[k] for r in rows] for k in keys]
    before = [sys.getrefcount(k) for k in shared + keys]
    for block in (7, 50, 1000):
        it, got = iter(rows), [[] for _ in keys]
        while True:
            columns, count, one_type, stop, extra = _c.pull_dict_columns(it, block, keys)
            for g, c in zip(got, columns):
                g += c
            if stop:
                break
        assert got == expected and stop == 1
    assert [sys.getrefcount(k) for k in shared + keys] == before


def test_keys_that_are_not_plain_str_are_looked_up_as_given():
    class Key(str):
        pass

    rows = [{Key("a"): 1, 2: "x"}, {Key("a"): 3, 2: "y"}]
    columns, count, one_type, stop, extra = _c.pull_dict_columns(iter(rows), 10, ("a", 2))
    assert columns == [[1, 3], ["x", "y"]] and count == 2 and stop == 1
