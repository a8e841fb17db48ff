"""Element structures follow tf.nest's rules everywhere (issue 14, defects 2, 4 and 5).

- Dicts match by KEY: tf.nest flattens a dict's values in sorted key order and packs them back in the
  target dict's own key order, so two elements whose dicts were built in different key orders combine
  value-by-key in every transformation (concatenate, zip, interleave, choose/sample, batch, padded_batch,
  unbatch, rebatch) and in saved state.
- A list returned by a user function is a tuple at the top level and an array inside.
- Strings are ``bytes`` whatever they were made from.
"""

from __future__ import annotations

import collections
import json
import struct

import attr
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxfeed.pipeline import Dataset, Options, checkpoint, errors
from jaxfeed.pipeline import structure as S

Point = collections.namedtuple("Point", ["y", "x"])


@attr.s(frozen=True)
class Pair:
    second = attr.ib()
    first = attr.ib()


def assert_element_equal(got, expected, path="element"):
    """Same nest (types, dict keys), same leaf values and dtypes."""
    if isinstance(expected, dict):
        assert isinstance(got, dict) and set(got) == set(expected), f"{path}: {got!r} vs {expected!r}"
        for k in expected:
            assert_element_equal(got[k], expected[k], f"{path}[{k!r}]")
    elif isinstance(expected, tuple):
        assert type(got) is type(expected) and len(got) == len(expected), f"{path}: {got!r} vs {expected!r}"
        for i, (a, b) in enumerate(zip(got, expected)):
            assert_element_equal(a, b, f"{path}[{i}]")
    else:
        assert type(got) is type(expected), f"{path}: {type(got)} vs {type(expected)}"
        if isinstance(expected, (np.ndarray, np.generic)):
            assert got.dtype == expected.dtype, f"{path}: dtype {got.dtype} vs {expected.dtype}"
            np.testing.assert_array_equal(got, expected, err_msg=path)
        else:
            assert got == expected, path


def values(ds):
    return list(ds.as_numpy_iterator())


# ============================================================================ the nest rules themselves
def test_flatten_takes_dict_values_in_sorted_key_order():
    assert S.flatten({"b": 1, "a": 2, "c": (3, {"z": 4, "y": 5})}) == [2, 1, 3, 5, 4]


def test_pack_as_keeps_the_target_dicts_own_key_order():
    packed = S.pack_as({"b": None, "a": None}, [1, 2])
    assert packed == {"a": 1, "b": 2} and list(packed) == ["b", "a"]


def test_flatten_then_pack_round_trips_any_insertion_order():
    element = {"label": 1, "id": 2, "meta": {"z": 3, "a": (4, 5)}}
    assert S.pack_as(element, S.flatten(element)) == element


def test_ordered_and_default_dicts_keep_their_type_and_order():
    od = collections.OrderedDict([("b", 1), ("a", 2)])
    assert S.flatten(od) == [2, 1]
    packed = S.pack_as(od, [20, 10])
    assert type(packed) is collections.OrderedDict and list(packed.items()) == [("b", 10), ("a", 20)]
    dd = collections.defaultdict(list, {"b": 1, "a": 2})
    packed = S.pack_as(dd, [20, 10])
    assert type(packed) is collections.defaultdict and packed.default_factory is list and packed == {"a": 20, "b": 10}


def test_a_mapping_that_is_not_a_dict_is_a_nest():
    import types

    proxy = types.MappingProxyType({"b": 1, "a": 2})
    assert S.flatten(proxy) == [2, 1]
    assert S.same_structure(proxy, {"a": 0, "b": 0})


def test_unsortable_dict_keys_raise_type_error_as_tf_nest():
    with pytest.raises(TypeError, match="sortable keys"):
        S.flatten({1: "x", "a": "y"})


def test_namedtuples_flatten_by_position_and_stay_namedtuples():
    assert S.flatten(Point(y=1, x=2)) == [1, 2]
    assert S.pack_as(Point(0, 0), [5, 6]) == Point(y=5, x=6)


def test_attrs_classes_are_nests_in_field_order():
    assert S.flatten(Pair(second=1, first={"b": 2, "a": 3})) == [1, 3, 2]
    assert S.pack_as(Pair(0, {"b": 0, "a": 0}), [7, 8, 9]) == Pair(7, {"b": 9, "a": 8})


def test_same_structure_matches_dicts_by_key_set_and_namedtuples_by_name_and_fields():
    assert S.same_structure({"a": 1, "b": 2}, collections.OrderedDict([("b", 0), ("a", 0)]))
    assert not S.same_structure({"a": 1}, {"b": 1})
    Other = collections.namedtuple("Point", ["y", "x"])  # same name and fields: one type for tf.nest
    assert S.same_structure(Point(1, 2), Other(1, 2))
    Renamed = collections.namedtuple("Vector", ["y", "x"])
    assert not S.same_structure(Point(1, 2), Renamed(1, 2))
    assert not S.same_structure(Point(1, 2), (1, 2))


def test_map_structure_pairs_leaves_by_key():
    out = S.map_structure(lambda a, b: a + b, {"b": 1, "a": 10}, {"a": 100, "b": 1000})
    assert out == {"b": 1001, "a": 110} and list(out) == ["b", "a"]


def test_paths_follow_flatten_order():
    element = {"b": 1, "a": (2, 3)}
    assert [p for p, _ in S.iter_structure_paths(element)] == ["['a'][0]", "['a'][1]", "['b']"]
    assert [x for _, x in S.iter_structure_paths(element)] == S.flatten(element)


# ============================================================================== defect 2: through nodes
def _b_then_a(i):
    return {"b": np.int64(i), "a": np.float32(10 * i)}


def _a_then_b(i):
    return {"a": np.float32(10 * i), "b": np.int64(i)}


def test_concatenate_then_batch_matches_dicts_by_key_issue_example():
    ds = Dataset.from_tensors({"b": 1, "a": 2}).concatenate(Dataset.from_tensors({"a": 20, "b": 10})).batch(2)
    (got,) = values(ds)
    assert_element_equal(got, {"b": np.array([1, 10], np.int32), "a": np.array([2, 20], np.int32)})


def test_concatenating_dicts_of_different_dtypes_in_different_key_orders_is_compatible():
    first = Dataset.range(2).map(_b_then_a)
    second = Dataset.range(2, 4).map(_a_then_b)
    ds = first.concatenate(second)
    assert S.flatten(ds.element_spec) == [S.TensorSpec((), np.float32), S.TensorSpec((), np.int64)]
    got = values(ds.batch(4))[0]
    assert_element_equal(got, {"b": np.arange(4, dtype=np.int64), "a": np.arange(0, 40, 10, dtype=np.float32)})


def test_random_access_concatenate_gathers_by_key():
    first = Dataset.from_tensor_slices({"b": np.arange(3), "a": np.arange(3) * 10.0})
    second = Dataset.from_tensor_slices({"a": np.arange(3, 6) * 10.0, "b": np.arange(3, 6)})
    got = values(first.concatenate(second).batch(6))[0]
    assert_element_equal(got, {"b": np.arange(6), "a": np.arange(6) * 10.0})


def test_interleave_of_datasets_with_different_key_orders_then_batch():
    def inner(i):
        make = _b_then_a if i % 2 == 0 else _a_then_b
        return Dataset.range(i * 10, i * 10 + 2).map(make)

    got = values(Dataset.range(2).interleave(inner, cycle_length=2).batch(4))[0]
    order = np.array([0, 10, 1, 11], np.int64)
    assert_element_equal(got, {"b": order, "a": (order * 10).astype(np.float32)})


def test_choose_from_datasets_with_different_key_orders_then_batch():
    first = Dataset.range(3).map(_b_then_a)
    second = Dataset.range(100, 103).map(_a_then_b)
    choice = Dataset.from_tensor_slices(np.array([0, 1, 0, 1], np.int64))
    from jaxfeed.pipeline import Dataset as D

    got = values(D.choose_from_datasets([first, second], choice).batch(4))[0]
    order = np.array([0, 100, 1, 101], np.int64)
    assert_element_equal(got, {"b": order, "a": (order * 10).astype(np.float32)})


def test_sample_from_datasets_with_different_key_orders_then_batch():
    first = Dataset.range(0, 50).map(_b_then_a)
    second = Dataset.range(1000, 1050).map(_a_then_b)
    got = values(Dataset.sample_from_datasets([first, second], seed=3).batch(100))[0]
    np.testing.assert_array_equal(got["a"], (got["b"] * 10).astype(np.float32))
    assert got["b"].dtype == np.int64 and got["a"].dtype == np.float32


def test_zip_of_a_dict_of_datasets_in_any_key_order():
    ds = Dataset.zip({"b": Dataset.range(2), "a": Dataset.range(2).map(lambda x: np.float32(x) + 0.5)})
    assert list(ds.element_spec) == ["b", "a"]
    got = values(ds)
    assert_element_equal(got[1], {"b": np.int64(1), "a": np.float32(1.5)})
    assert list(got[1]) == ["b", "a"]


def test_zip_of_streams_whose_dict_elements_differ_in_key_order():
    left = Dataset.range(2).map(_b_then_a).concatenate(Dataset.range(2, 4).map(_a_then_b))
    got = values(Dataset.zip((left, Dataset.range(4))).batch(4))[0]
    assert_element_equal(got[0], {"b": np.arange(4, dtype=np.int64),
                                  "a": np.arange(0, 40, 10, dtype=np.float32)})


def test_padded_batch_of_dicts_in_different_key_orders():
    first = Dataset.range(1, 3).map(lambda n: {"b": np.arange(n), "a": np.full(n, 7.0, np.float32)})
    second = Dataset.range(3, 4).map(lambda n: {"a": np.full(n, 7.0, np.float32), "b": np.arange(n)})
    got = values(first.concatenate(second).padded_batch(3, padding_values={"a": np.float32(-1), "b": np.int64(-2)}))
    expected_b = np.array([[0, -2, -2], [0, 1, -2], [0, 1, 2]], np.int64)
    expected_a = np.array([[7, -1, -1], [7, 7, -1], [7, 7, 7]], np.float32)
    assert_element_equal(got[0], {"b": expected_b, "a": expected_a})


def test_padded_batch_arguments_match_components_by_key():
    ds = Dataset.from_tensor_slices({"b": np.arange(4, dtype=np.int64)}).map(
        lambda d: {"b": np.arange(d["b"]), "a": np.full(d["b"], 1.0, np.float32)})
    got = values(ds.padded_batch(4, padded_shapes={"a": [5], "b": [4]},
                                 padding_values={"a": np.float32(9), "b": np.int64(-1)}))[0]
    assert got["a"].shape == (4, 5) and got["b"].shape == (4, 4)
    assert got["a"][0].tolist() == [9] * 5 and got["b"][0].tolist() == [-1] * 4


def test_unbatch_and_rebatch_of_batches_in_different_key_orders():
    first = Dataset.range(3).map(_b_then_a).batch(3)
    second = Dataset.range(3, 6).map(_a_then_b).batch(3)
    rows = values(first.concatenate(second).unbatch())
    for i, row in enumerate(rows):
        assert_element_equal(row, _b_then_a(i))
    got = values(first.concatenate(second).rebatch(4))
    assert_element_equal(got[0], {"b": np.arange(4, dtype=np.int64), "a": np.arange(0, 40, 10, dtype=np.float32)})


def test_function_results_with_dicts_in_varying_key_order_batch_by_key():
    ds = Dataset.range(4).map(lambda i: _b_then_a(i) if i % 2 else _a_then_b(i)).batch(4)
    got = values(ds)[0]
    assert_element_equal(got, {"b": np.arange(4, dtype=np.int64), "a": np.arange(0, 40, 10, dtype=np.float32)})


def test_a_shuffle_buffer_of_unsorted_dicts_resumes_from_a_saved_file_exactly(tmp_path):
    ds = Dataset.range(40).map(_b_then_a).shuffle(32, seed=5, reshuffle_each_iteration=False)
    expected = values(ds)
    it = ds.make_iterator()
    head = [next(it) for _ in range(3)]
    checkpoint.save(it, str(tmp_path / "state"))
    rest = list(checkpoint.restore(ds, str(tmp_path / "state")))
    assert len(head + rest) == len(expected)
    for got, want in zip(head + rest, expected):
        assert_element_equal(got, want)
        assert got["a"] == np.float32(10 * got["b"]) and list(got) == ["b", "a"]


def _rewrite_state_file(data: bytes, edit) -> bytes:
    """The state file with its JSON header passed through ``edit`` (a new CRC, as a writer would make)."""
    import google_crc32c

    prefix = struct.Struct("<8sIQQ")
    magic, version, header_len, blob_len = prefix.unpack_from(data)
    header = json.loads(data[prefix.size:prefix.size + header_len])
    edit(header)
    new_header = json.dumps(header, separators=(",", ":")).encode()
    blobs = data[prefix.size + header_len:prefix.size + header_len + blob_len]
    body = prefix.pack(magic, version, len(new_header), blob_len) + new_header + blobs
    return body + struct.pack("<I", google_crc32c.value(body))


def _stacked_entries(tree):
    if isinstance(tree, dict):
        if tree.get("$t") == "stacked":
            yield tree
        for v in tree.values():
            yield from _stacked_entries(v)
    elif isinstance(tree, list):
        for v in tree:
            yield from _stacked_entries(v)


def test_states_written_before_sorted_key_order_are_read_with_their_own_leaf_order():
    """A state file written when stacked dict leaves were stored in the dicts' insertion order (no
    ``order`` marker) still puts every value under its key."""
    rows = [_b_then_a(i) for i in range(10)]
    data = checkpoint.serialize({"buffer": rows})

    def to_old_layout(header):
        (entry,) = _stacked_entries(header["tree"])
        assert entry.pop("order") == "sorted"
        entry["leaves"].reverse()  # insertion order b, a instead of sorted a, b
        entry["scalar"].reverse()

    restored = checkpoint.deserialize(_rewrite_state_file(data, to_old_layout))["buffer"]
    for got, want in zip(restored, rows):
        assert_element_equal(got, want)
    for got, want in zip(checkpoint.deserialize(data)["buffer"], rows):
        assert_element_equal(got, want)


# ---------------------------------------------------------------- property: any key insertion order
_KEYS = st.sampled_from(["a", "b", "c", "id", "label", "z"])


@st.composite
def _dict_structures(draw):
    """A nested dict structure (keys -> dtype names or sub-dicts), as one canonical sorted form."""
    def build(depth):
        keys = draw(st.lists(_KEYS, min_size=1, max_size=4, unique=True))
        out = {}
        for k in sorted(keys):
            if depth < 2 and draw(st.booleans()):
                out[k] = build(depth + 1)
            else:
                out[k] = draw(st.sampled_from(["int64", "float32", "int32"]))
        return out

    return build(0)


def _shuffled(structure, draw_perm, value_of):
    keys = draw_perm(sorted(structure))
    return {k: _shuffled(structure[k], draw_perm, value_of) if isinstance(structure[k], dict)
            else value_of(k, structure[k]) for k in keys}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_dict_structures(), st.data())
def test_dict_elements_in_random_key_orders_combine_by_key_in_every_transformation(structure, data):
    def element(i, perm=True):
        draw_perm = (lambda ks: data.draw(st.permutations(ks))) if perm else sorted

        def value_of(key, dtype):
            return np.asarray(i * 7 + len(key), dtype=dtype)[()]

        return _shuffled(structure, draw_perm, value_of)

    n = 4
    elements = [element(i) for i in range(n)]
    expected = [element(i, perm=False) for i in range(n)]  # the same values, keys sorted

    sources = [Dataset.from_tensors(e) for e in elements]
    chained = sources[0]
    for s in sources[1:]:
        chained = chained.concatenate(s)
    stacked = S.stack(expected)

    assert_element_equal(values(chained.batch(n))[0], stacked)
    for got, want in zip(values(chained.batch(2).unbatch()), expected):
        assert_element_equal(got, want)
    assert_element_equal(values(chained.batch(1).rebatch(n))[0], stacked)
    assert_element_equal(values(chained.padded_batch(n))[0], stacked)
    woven = Dataset.range(n).interleave(lambda i: sources[int(i)], cycle_length=2)
    assert_element_equal(values(woven.batch(n))[0], stacked)
    zipped = values(Dataset.zip((chained, Dataset.range(n))).batch(n))[0]
    assert_element_equal(zipped[0], stacked)


# ================================================================ defect 4: lists in function results
def test_an_inner_list_in_a_function_result_is_one_array():
    got = values(Dataset.range(2).map(lambda x: {"a": [x, x]}))
    assert_element_equal(got[1], {"a": np.array([1, 1], np.int64)})


def test_a_top_level_list_is_a_tuple_and_its_inner_lists_arrays():
    got = values(Dataset.range(2).map(lambda x: [x, [x, x + 1]]))
    assert_element_equal(got[1], (np.int64(1), np.array([1, 2], np.int64)))


def test_scan_with_a_list_state_runs_the_fibonacci_kernel_test():
    ds = Dataset.range(5).scan([0, 1], lambda s, _: ([s[1], s[0] + s[1]], s[0]))
    got = values(ds)
    assert [int(x) for x in got] == [0, 1, 1, 2, 3]
    assert all(x.dtype == np.int32 for x in got)


def test_scan_outputs_an_inner_list_as_an_array():
    got = values(Dataset.range(3).scan(np.int64(0), lambda s, x: (s + x, [s, x])))
    assert_element_equal(got[2], np.array([1, 2], np.int64))


# ========================================================================== defect 5: strings are bytes
def test_slices_of_an_object_array_of_str_are_bytes_as_after_a_map():
    data = np.array(["a", "bc"], dtype=object)
    plain = values(Dataset.from_tensor_slices(data))
    mapped = values(Dataset.from_tensor_slices(data).map(lambda s: s))
    assert plain == mapped == [b"a", b"bc"]
    assert all(type(x) is bytes for x in plain + mapped)


@pytest.mark.parametrize("make", [
    lambda: "x", lambda: np.str_("x"), lambda: np.bytes_(b"x"), lambda: np.array("x"),
    lambda: np.array(["x"])[0], lambda: np.array("x", dtype=object)[()],
], ids=["str", "np.str_", "np.bytes_", "0-d U array", "U item", "object item"])
def test_a_string_scalar_from_a_function_or_data_is_bytes(make):
    from_function = values(Dataset.range(1).map(lambda _: make()))[0]
    from_data = values(Dataset.from_tensors(make()))[0]
    assert type(from_function) is bytes and from_function == b"x"
    assert type(from_data) is bytes and from_data == b"x"


@pytest.mark.parametrize("make", [
    lambda: np.array(["x", "yz"]), lambda: np.array(["x", "yz"], dtype=object),
    lambda: np.array([b"x", b"yz"]), lambda: ["x", "yz"],
], ids=["U array", "object array of str", "S array", "list of str"])
def test_string_arrays_from_functions_data_and_generators_hold_bytes(make):
    def check(arr):
        assert isinstance(arr, np.ndarray) and arr.dtype == object
        assert arr.tolist() == [b"x", b"yz"] and all(type(x) is bytes for x in arr.tolist())

    check(values(Dataset.range(1).map(lambda _: (make(), 0)))[0][0])
    check(values(Dataset.from_tensors({"s": make()}))[0]["s"])
    check(np.stack(values(Dataset.from_tensor_slices(make()))).astype(object))
    gen = Dataset.from_generator(lambda: iter([make()]), output_signature=S.TensorSpec((2,), S.STRING))
    check(values(gen)[0])


def test_a_generator_yielding_str_gives_bytes():
    gen = Dataset.from_generator(lambda: iter(["a", np.str_("b")]), output_signature=S.TensorSpec((), S.STRING))
    got = values(gen)
    assert got == [b"a", b"b"] and all(type(x) is bytes for x in got)


def test_concatenating_a_namedtuple_and_a_plain_tuple_is_incompatible_as_in_tf():
    with pytest.raises(TypeError, match="Incompatible dataset elements"):
        Dataset.from_tensors(Point(1, 2)).concatenate(Dataset.from_tensors((1, 2)))


def test_concatenating_dicts_with_different_keys_is_still_incompatible():
    with pytest.raises(TypeError, match="Incompatible dataset elements"):
        Dataset.from_tensors({"a": 1}).concatenate(Dataset.from_tensors({"b": 1}))


def test_an_ordered_dict_element_keeps_its_type_and_order_through_map_and_batch():
    od = collections.OrderedDict([("b", np.int64(1)), ("a", np.float32(2))])
    got = values(Dataset.from_tensors(od).map(lambda d: d).batch(1))[0]
    assert type(got) is collections.OrderedDict and list(got) == ["b", "a"]
    assert got["b"].dtype == np.int64 and got["a"].dtype == np.float32


# ------------------------------------------------- key order of the output: the spec's, as tf.data packs
def test_concatenate_yields_the_second_inputs_dicts_in_the_specs_key_order():
    ds = Dataset.from_tensors({"b": 1, "a": 2}).concatenate(Dataset.from_tensors({"a": 20, "b": 10}))
    assert list(ds.element_spec) == ["b", "a"]
    got = values(ds)
    assert [list(e) for e in got] == [["b", "a"], ["b", "a"]] and got[1] == {"b": 10, "a": 20}


def test_a_streamed_concatenate_yields_dicts_in_the_specs_key_order():
    ds = Dataset.range(2).map(_b_then_a).concatenate(Dataset.range(2, 4).map(_a_then_b))
    got = values(ds)
    assert all(list(e) == ["b", "a"] for e in got)
    assert [int(e["b"]) for e in got] == [0, 1, 2, 3]


def test_choose_from_datasets_yields_dicts_in_the_specs_key_order():
    first = Dataset.from_tensors({"b": np.int64(1), "a": np.int64(2)})
    second = Dataset.from_tensors({"a": np.int64(20), "b": np.int64(10)})
    choice = Dataset.from_tensor_slices(np.array([0, 1], np.int64))
    got = values(Dataset.choose_from_datasets([first, second], choice))
    assert [list(e) for e in got] == [["b", "a"], ["b", "a"]] and got[1] == {"b": 10, "a": 20}


def test_sample_from_datasets_takes_its_spec_from_the_inputs_it_can_draw():
    """tf.data leaves out inputs of constant weight 0: the spec and key order are the drawn input's."""
    first = Dataset.from_tensors({"b": np.int64(1), "a": np.int64(2)})
    second = Dataset.from_tensors({"a": np.int64(20), "b": np.int64(10)})
    ds = Dataset.sample_from_datasets([first, second], weights=[0.0, 1.0], seed=1)
    assert list(ds.element_spec) == ["a", "b"]
    assert [list(e) for e in values(ds)] == [["a", "b"]]


def test_a_list_of_int_tuples_in_data_is_an_int32_array_as_in_tf():
    """Tuples inside a list are rows of the array (they were float32 before: a silent dtype change)."""
    got = values(Dataset.from_tensor_slices([(1, 2), (3, 4)]))
    assert_element_equal(got[1], np.array([3, 4], np.int32))


def test_an_inner_list_of_dicts_in_a_function_result_raises_type_error():
    with pytest.raises(TypeError, match="list holds a dict"):
        values(Dataset.range(1).map(lambda x: {"a": [{"k": 1}]}))


# ---------------------------------------------------------------------- batches never relabel a dict
def _alternating_keys(i):
    """Elements whose structures differ only in a dict key: the same leaf count, other keys."""
    return {"a": {"x": i}} if i % 2 == 0 else {"b": {"x": i}}


def _no_fusion():
    options = Options()
    options.experimental_optimization.map_and_batch_fusion = False
    return options


@pytest.mark.parametrize("make", [
    lambda: Dataset.range(4).map(_alternating_keys).batch(2),
    lambda: Dataset.range(4).map(_alternating_keys).batch(2).with_options(_no_fusion()),
    lambda: Dataset.range(4).map(_alternating_keys, num_parallel_calls=2).batch(2),
    lambda: Dataset.range(4).map(_alternating_keys, num_parallel_calls=2, executor="process").batch(2),
    lambda: Dataset.range(4).map(_alternating_keys).padded_batch(2),
    lambda: Dataset.range(4).map(_alternating_keys).batch(1).rebatch(2),
    lambda: Dataset.range(4).map(lambda i: {"a": (i, i)} if i % 2 == 0 else {"b": (i, i)}).batch(2),
], ids=["fused", "batch", "thread-map", "process-map", "padded_batch", "rebatch", "dict-of-tuples"])
def test_a_batch_of_elements_whose_dict_keys_differ_raises_instead_of_taking_the_first_keys(make):
    """{"a": {"x": 0}} and {"b": {"x": 1}} have the same leaves: stacking them by position used to give
    {"a": {"x": [0, 1]}}, silently moving element 1's value under another key."""
    with pytest.raises(errors.InvalidArgumentError, match="structure"):
        list(make())


def test_unbatch_keeps_each_rows_own_structure():
    got = list(Dataset.range(4).map(_alternating_keys).batch(1).unbatch())
    assert [sorted(e) for e in got] == [["a"], ["b"], ["a"], ["b"]]
