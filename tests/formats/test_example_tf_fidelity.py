"""Example / SequenceExample parsing where a differential fuzzer found jaxfeed and TensorFlow apart.

Every expected value and error below is what TensorFlow 2.21 gave for the same records and specs
(tf.io.parse_example / parse_single_example / parse_sequence_example; TF is not imported here).
"""

import numpy as np
import pytest

from jaxfeed.formats import (Feature, FixedLenFeature, FixedLenSequenceFeature, VarLenFeature, make_example,
                             make_sequence_example, parse_example, parse_sequence_example, parse_single_example,
                             parse_single_sequence_example)
from jaxfeed.pipeline.errors import InvalidArgumentError

# Example with feature "b" = tf.train.Feature(): a Feature message with no list at all (no kind)
KINDLESS = bytes.fromhex("0a070a050a01621200")
# Example with feature "b" = an explicitly set, empty int64_list (it has a kind)
EMPTY_INT64_LIST = bytes.fromhex("0a090a070a016212021a00")
MISSING = make_example({}).SerializeToString()
B_1234 = make_example({"b": [1, 2, 3, 4]}).SerializeToString()
B_12 = make_example({"b": [1, 2]}).SerializeToString()


def seq_record(context, feature_lists):
    return make_sequence_example(context, feature_lists).SerializeToString()


# ------------------------------------------------------------------ E4: a Feature with no kind is missing
def test_kindless_feature_is_missing_so_the_default_is_used():
    assert KINDLESS == make_example({"b": Feature()}).SerializeToString()
    got = parse_example([KINDLESS], {"b": FixedLenFeature([], np.int64, default_value=5)})
    assert got["b"].tolist() == [5]
    assert parse_single_example(KINDLESS, {"b": FixedLenFeature([], np.int64, default_value=5)})["b"] == 5
    got = parse_example([KINDLESS], {"b": FixedLenFeature([], "string", default_value="x")})
    assert got["b"].tolist() == [b"x"]
    got = parse_example([KINDLESS], {"b": FixedLenFeature([], np.float32, default_value=1.5)})
    assert got["b"].tolist() == [1.5]


@pytest.mark.parametrize("shape", [[], [0]])
def test_kindless_feature_without_default_is_required_but_missing(shape):
    # TF: "Feature: b (data type: int64) is required but could not be found."
    with pytest.raises(InvalidArgumentError, match=r"'b' is required but missing in record 0"):
        parse_example([KINDLESS], {"b": FixedLenFeature(shape, np.int64)})
    with pytest.raises(InvalidArgumentError, match=r"'b' is required but missing"):
        parse_single_example(KINDLESS, {"b": FixedLenFeature(shape, np.int64)})


def test_explicit_empty_list_is_present_not_missing():
    # TF: [0] gives [[]]; [] with a default: "Number of int64 values != expected. Values size: 0 but output shape: []"
    assert parse_example([EMPTY_INT64_LIST], {"b": FixedLenFeature([0], np.int64)})["b"].shape == (1, 0)
    with pytest.raises(InvalidArgumentError, match="has 0 values"):
        parse_example([EMPTY_INT64_LIST], {"b": FixedLenFeature([], np.int64, default_value=5)})


def test_kindless_feature_as_varlen_and_fixed_len_sequence():
    got = parse_example([KINDLESS], {"b": VarLenFeature(np.int64)})["b"]
    indices, values, dense_shape = got.to_sparse()
    assert indices.shape == (0, 2) and values.tolist() == [] and dense_shape.tolist() == [1, 0]
    assert parse_single_example(KINDLESS, {"b": VarLenFeature("string")})["b"].tolist() == []
    spec = {"b": FixedLenSequenceFeature([2], np.int64, allow_missing=True, default_value=9)}
    assert parse_example([KINDLESS, B_1234], spec)["b"].tolist() == [[[9, 9], [9, 9]], [[1, 2], [3, 4]]]
    spec = {"b": FixedLenSequenceFeature([], np.int64, allow_missing=True)}
    assert parse_example([KINDLESS], spec)["b"].tolist() == [[]]


def test_kindless_context_feature_of_a_sequence_example_is_present_with_no_values():
    # TF's SequenceExample parser reads a kindless context Feature as present with 0 values
    record = seq_record({"c": Feature()}, {})
    assert record == bytes.fromhex("0a070a050a01631200")
    context, _, _ = parse_sequence_example([record], {"c": FixedLenFeature([0], np.int64)})
    assert context["c"].shape == (1, 0)
    # TF: "Unexpected number of elements in example"
    with pytest.raises(InvalidArgumentError, match="has 0 values"):
        parse_sequence_example([record], {"c": FixedLenFeature([], np.int64, default_value=5)})
    context, _, _ = parse_sequence_example([record], {"c": VarLenFeature(np.float32)})
    assert context["c"].to_sparse()[2].tolist() == [1, 0]


def test_kindless_step_of_a_feature_list_is_a_step_with_no_values():
    record = seq_record({}, {"s": [[1], Feature(), [2]]})
    assert record == bytes.fromhex("12170a150a017312100a051a030a01010a000a051a030a0102")
    _, seqs, _ = parse_sequence_example([record], None, {"s": VarLenFeature(np.int64)})
    indices, values, dense_shape = seqs["s"].to_sparse()
    # TF (3-D sparse): indices [[0,0,0],[0,2,0]], values [1,2], dense_shape [1,3,1]
    assert values.tolist() == [1, 2] and seqs["s"].lengths.tolist() == [1, 0, 1]
    # TF: "Key: s, Index: 1.  Number of values != expected.  values size: 0 but output shape: []"
    with pytest.raises(InvalidArgumentError, match="has 0 values"):
        parse_sequence_example([record], None, {"s": FixedLenSequenceFeature([], np.int64)})


# ------------------------------------------------------------------ E1: defaults are checked, never broadcast
@pytest.mark.parametrize("records", [[MISSING], [B_12], []], ids=["needed", "not-needed", "no-records"])
def test_default_of_the_wrong_size_is_an_error_at_every_parse(records):
    # TF: InvalidArgumentError "Input to reshape is a tensor with 1 values, but the requested shape has 2"
    with pytest.raises(InvalidArgumentError, match="has 1 values, but shape \\[2\\] needs 2"):
        parse_example(records, {"b": FixedLenFeature([2], np.int64, default_value=5)})


def test_default_of_the_wrong_size_in_single_and_context_parsing():
    with pytest.raises(InvalidArgumentError, match="has 3 values, but shape \\[2\\] needs 2"):
        parse_single_example(B_12, {"b": FixedLenFeature([2], np.int64, default_value=[1, 2, 3])})
    with pytest.raises(InvalidArgumentError, match="has 1 values, but shape \\[2\\] needs 2"):
        parse_sequence_example([seq_record({}, {})], {"b": FixedLenFeature([2], np.int64, default_value=5)})


def test_default_is_reshaped_not_broadcast():
    assert parse_example([MISSING], {"b": FixedLenFeature([2], np.int64, default_value=[[1, 2]])})["b"].tolist() \
        == [[1, 2]]
    assert parse_example([MISSING], {"b": FixedLenFeature([2, 1], np.int64, default_value=[1, 2])})["b"].tolist() \
        == [[[1], [2]]]
    assert parse_example([MISSING], {"b": FixedLenFeature([], np.int64, default_value=[5])})["b"].tolist() == [5]
    assert parse_example([MISSING], {"b": FixedLenFeature([1], np.int64, default_value=5)})["b"].tolist() == [[5]]
    with pytest.raises(InvalidArgumentError, match="has 0 values, but shape \\[\\] needs 1"):
        parse_example([B_12], {"b": FixedLenFeature([], np.int64, default_value=[])})


def test_an_empty_default_of_an_empty_shape_is_no_default():
    # TF: "Feature: b (data type: int64) is required but could not be found."
    with pytest.raises(InvalidArgumentError, match="required but missing"):
        parse_example([MISSING], {"b": FixedLenFeature([0], np.int64, default_value=[])})


@pytest.mark.parametrize("dtype,default,error", [
    (np.int64, 1.5, TypeError),        # TF: TypeError Cannot convert 1.5 to EagerTensor of dtype int64
    (np.int64, 2.0, TypeError),        # same
    (np.int64, "x", TypeError),
    (np.int64, b"7", TypeError),
    (np.int64, 2 ** 63, ValueError),   # TF: ValueError ... out-of-range integer
    (np.int64, [None], (TypeError, ValueError)),
    (np.int64, [[1], [2, 3]], ValueError),  # TF: ValueError non-rectangular
    (np.float32, "x", TypeError),
    ("string", 5, TypeError),          # TF: TypeError Cannot convert 5 to EagerTensor of dtype string
])
def test_default_that_cannot_be_converted_is_refused(dtype, default, error):
    shape = [len(default)] if isinstance(default, list) else []
    with pytest.raises(error, match="default of feature 'b'"):
        parse_example([B_12], {"b": FixedLenFeature(shape, dtype, default_value=default)})


def test_numpy_float_defaults_that_would_change_are_refused():
    # TF truncates np.float64(2.5) to 2 and wraps np.uint64(2**63): jaxfeed refuses (never a changed value)
    with pytest.raises(TypeError, match="default of feature 'b'"):
        parse_example([MISSING], {"b": FixedLenFeature([], np.int64, default_value=np.float64(2.5))})
    with pytest.raises(ValueError, match="out of the int64 range"):
        parse_example([MISSING], {"b": FixedLenFeature([], np.int64, default_value=np.uint64(2 ** 63))})


@pytest.mark.parametrize("dtype,default,want", [
    (np.int64, True, [1]),
    (np.int64, np.float64(2.0), [2]),
    (np.int64, -2 ** 63, [-2 ** 63]),
    (np.float32, 5, [5.0]),
    (np.float32, 0.1, [0.10000000149011612]),
    (np.float32, 1e40, [float("inf")]),
    (np.float32, 2 ** 70, [1.1805916207174113e+21]),
    (np.float32, True, [1.0]),
    ("string", "é", [b"\xc3\xa9"]),
])
def test_default_conversions_tf_accepts(dtype, default, want):
    assert parse_example([MISSING], {"b": FixedLenFeature([], dtype, default_value=default)})["b"].tolist() == want


def test_mixed_bytes_and_str_string_default():
    got = parse_example([MISSING], {"b": FixedLenFeature([2], "string", default_value=[b"1", "a"])})
    assert got["b"].tolist() == [[b"1", b"a"]]


# ------------------------------------------------------------------ FixedLenSequenceFeature in parse_example
def test_fixed_len_sequence_padding_value_must_be_one_value():
    spec = {"b": FixedLenSequenceFeature([], np.int64, allow_missing=True, default_value=[7])}
    assert parse_example([B_12, MISSING], spec)["b"].tolist() == [[1, 2], [7, 7]]
    # TF: "Input to reshape is a tensor with 2 values, but the requested shape has 1"
    for shape in ([], [2]):
        spec = {"b": FixedLenSequenceFeature(shape, np.int64, allow_missing=True, default_value=[7, 8])}
        with pytest.raises(InvalidArgumentError, match="has 2 values, but shape \\[\\] needs 1"):
            parse_example([B_12, MISSING], spec)
    with pytest.raises(TypeError, match="default of feature 'b'"):
        parse_example([B_12], {"b": FixedLenSequenceFeature([], np.int64, allow_missing=True, default_value=1.5)})
    spec = {"b": FixedLenSequenceFeature([], "string", allow_missing=True, default_value="x")}
    got = parse_example([make_example({"b": [b"a", b"b"]}).SerializeToString(), MISSING], spec)
    assert got["b"].tolist() == [[b"a", b"b"], [b"x", b"x"]]


# ------------------------------------------------------------------ E2: allow_missing=False in parse_example
@pytest.mark.parametrize("records", [[B_12], [MISSING], [], [b"\xff"]], ids=["present", "missing", "none", "bad"])
def test_fixed_len_sequence_feature_requires_allow_missing_in_parse_example(records):
    # TF: ValueError "Unsupported: FixedLenSequenceFeature requires allow_missing to be True."
    with pytest.raises(ValueError, match="requires allow_missing to be True"):
        parse_example(records, {"b": FixedLenSequenceFeature([], np.int64)})


def test_fixed_len_sequence_feature_requires_allow_missing_in_parse_single_example():
    with pytest.raises(ValueError, match="requires allow_missing to be True"):
        parse_single_example(B_12, {"b": FixedLenSequenceFeature([], np.int64, default_value=0)})


# ------------------------------------------------------------------ E3: sequence features take no default
@pytest.mark.parametrize("allow_missing", [False, True])
def test_sequence_fixed_len_sequence_feature_with_a_default_is_refused(allow_missing):
    records = [seq_record({}, {"s": [[1], [2]]}), seq_record({}, {"s": [[1]]})]
    spec = {"s": FixedLenSequenceFeature([], np.int64, allow_missing=allow_missing, default_value=7)}
    # TF: ValueError "Value feature_list.dense_defaults[s] must be None"
    with pytest.raises(ValueError, match=r"feature_list.dense_defaults\[s\] must be None"):
        parse_sequence_example(records, None, spec)
    with pytest.raises(ValueError, match=r"feature_list.dense_defaults\[s\] must be None"):
        parse_single_sequence_example(records[0], None, spec)


def test_sequence_fixed_len_sequence_feature_pads_with_zero():
    records = [seq_record({}, {"s": [[1], [2]]}), seq_record({}, {"s": [[1]]}), seq_record({}, {})]
    spec = {"s": FixedLenSequenceFeature([], np.int64, allow_missing=True)}
    _, seqs, lengths = parse_sequence_example(records, None, spec)
    assert seqs["s"].tolist() == [[1, 2], [1, 0], [0, 0]] and lengths["s"].tolist() == [2, 1, 0]


def test_specs_sequence_example_does_not_support():
    record = seq_record({}, {"s": [[1]]})
    # TF: ValueError "Unsupported FixedLenSequenceFeature ... for key 's'"
    with pytest.raises(ValueError, match="unsupported FixedLenSequenceFeature"):
        parse_sequence_example([record], {"s": FixedLenSequenceFeature([], np.int64, allow_missing=True)})
    # TF: ValueError "Unsupported FixedLenFeature ... for key 's'"
    with pytest.raises(ValueError, match="unsupported FixedLenFeature"):
        parse_sequence_example([record], None, {"s": FixedLenFeature([], np.int64)})
    # TF: ValueError "Unsupported int 5 for key 'a'"
    with pytest.raises(ValueError, match="unsupported int 5 for key 'a'"):
        parse_example([MISSING], {"a": 5})


# ------------------------------------------------------------------ E5: float bits are kept, NaN payloads too
SNAN = 0x7FA00001  # a signalling NaN; through a Python float it would come back as 0x7fe00001


def float_feature_with_bits(*bits):
    import struct

    # FloatList, packed: field 1, wire type 2
    payload = struct.pack(f"<{len(bits)}I", *bits)
    float_list = b"\x0a" + bytes([len(payload)]) + payload
    return Feature.FromString(b"\x12" + bytes([len(float_list)]) + float_list)


def bits(array):
    return np.asarray(array, dtype=np.float32).view(np.uint32).reshape(-1).tolist()


def test_signalling_nan_bits_are_kept_in_every_float_spec():
    f = float_feature_with_bits(0x3F800000, SNAN)
    record = make_example({"b": f}).SerializeToString()
    # the fuzzer's case: TF gave [0x7fa00001]
    fuzz = bytes.fromhex("0a130a110a0162120c120a0a08cdcccc3d0100a07f")
    got = parse_example([fuzz], {"b": FixedLenSequenceFeature([], np.float32, allow_missing=True, default_value=0.001)})
    assert bits(got["b"]) == [0x3DCCCCCD, SNAN]
    got = parse_example([MISSING, record], {"b": FixedLenFeature([2], np.float32, default_value=[1.0, 2.0])})
    assert bits(got["b"]) == [0x3F800000, 0x40000000, 0x3F800000, SNAN]
    got = parse_example([record, MISSING], {"b": VarLenFeature(np.float32)})
    assert bits(got["b"].values) == [0x3F800000, SNAN]
    assert bits(parse_single_example(record, {"b": VarLenFeature(np.float32)})["b"]) == [0x3F800000, SNAN]
    got = parse_example([record, MISSING], {"b": FixedLenSequenceFeature([], np.float32, allow_missing=True)})
    assert bits(got["b"]) == [0x3F800000, SNAN, 0, 0]


def test_signalling_nan_bits_are_kept_in_sequence_examples():
    record = seq_record({"c": float_feature_with_bits(SNAN)},
                        {"s": [float_feature_with_bits(0x3F800000), float_feature_with_bits(SNAN)]})
    context, seqs, _ = parse_sequence_example(
        [record, seq_record({"c": [0.5]}, {})], {"c": FixedLenFeature([], np.float32)},
        {"s": FixedLenSequenceFeature([], np.float32, allow_missing=True)})
    assert bits(context["c"]) == [SNAN, 0x3F000000]
    assert bits(seqs["s"]) == [0x3F800000, SNAN, 0, 0]
    _, seqs, _ = parse_sequence_example([record], None, {"s": VarLenFeature(np.float32)})
    assert bits(seqs["s"].values) == [0x3F800000, SNAN]
