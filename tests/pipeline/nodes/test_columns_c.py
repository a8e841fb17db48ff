"""The optional C passes of ``from_generator``'s dict and tuple rows into columns (``pipeline/_columns_c.c``)
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

from node_test_helpers import same
from test_generator_columns import leaf, p6_rows, p6_spec, rows_for, run, signatures, single

_c = pytest.importorskip("jaxfeed.pipeline._columns_c", reason="the C extension is not built")

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
