"""parse_example / parse_sequence_example accept a batch of bytes-like records (bytes, bytearray,
memoryview, numpy bytes or object scalars) and refuse anything else -- a str, None, a number -- with
InvalidArgumentError naming the record, never a TypeError/IndexError and never a silent conversion
(``bytes(5)`` is five zero bytes)."""

import numpy as np
import pytest

from jaxfeed.formats import (FixedLenFeature, FixedLenSequenceFeature, make_example, make_sequence_example,
                             parse_example, parse_sequence_example, parse_single_example,
                             parse_single_sequence_example)
from jaxfeed.pipeline import errors

SPEC = {"id": FixedLenFeature([], "int64")}
RECORD = make_example({"id": [7]}).SerializeToString()
SEQ = make_sequence_example({"n": [2]}, {"w": [[1], [2]]}).SerializeToString()
SEQ_SPECS = ({"n": FixedLenFeature([], "int64")}, {"w": FixedLenSequenceFeature([], "int64")})

BYTES_LIKE = {
    "bytes": lambda r: r,
    "bytearray": bytearray,
    "memoryview": memoryview,
    "numpy bytes": np.bytes_,
    "0-d object array": lambda r: np.array(r, dtype=object),
}


@pytest.mark.parametrize("make", BYTES_LIKE.values(), ids=BYTES_LIKE.keys())
def test_a_batch_of_bytes_like_records_is_parsed(make):
    for batch in ([make(RECORD), RECORD], (make(RECORD), make(RECORD))):
        assert parse_example(batch, SPEC)["id"].tolist() == [7, 7]
    arr = np.empty(2, dtype=object)
    arr[0], arr[1] = make(RECORD), RECORD
    assert parse_example(arr, SPEC)["id"].tolist() == [7, 7]
    context, sequences, lengths = parse_sequence_example([make(SEQ)], *SEQ_SPECS)
    assert context["n"].tolist() == [2] and sequences["w"].tolist() == [[1, 2]] and lengths["w"].tolist() == [2]


@pytest.mark.parametrize("make", BYTES_LIKE.values(), ids=BYTES_LIKE.keys())
def test_one_bytes_like_record_is_parsed_by_the_single_variants(make):
    assert parse_single_example(make(RECORD), SPEC)["id"] == 7
    context, sequences = parse_single_sequence_example(make(SEQ), *SEQ_SPECS)
    assert context["n"] == 2 and sequences["w"].tolist() == [1, 2]


NOT_RECORDS = {"str": "abc", "None": None, "int": 5, "float": 1.5, "list": [RECORD], "dict": {"a": RECORD}}


@pytest.mark.parametrize("value", NOT_RECORDS.values(), ids=NOT_RECORDS.keys())
def test_a_record_that_is_not_bytes_like_is_invalid_argument(value):
    with pytest.raises(errors.InvalidArgumentError, match="record 1 is"):
        parse_example([RECORD, value] if not isinstance(value, list) else [RECORD, {"x": 1}], SPEC)
    with pytest.raises(errors.InvalidArgumentError):
        parse_sequence_example([SEQ, value if not isinstance(value, list) else 3], *SEQ_SPECS)
    if not isinstance(value, (list, dict)):
        with pytest.raises(errors.InvalidArgumentError):
            parse_single_example(value, SPEC)
        with pytest.raises(errors.InvalidArgumentError):
            parse_single_sequence_example(value, *SEQ_SPECS)


@pytest.mark.parametrize("batch", [None, 5, "abc", np.array(["abc"]), np.array([1, 2]), iter([RECORD])],
                         ids=["None", "int", "str", "unicode array", "int array", "iterator"])
def test_a_batch_that_is_not_records_is_invalid_argument(batch):
    with pytest.raises(errors.InvalidArgumentError):
        parse_example(batch, SPEC)


def test_a_single_record_given_to_the_batch_variant_is_refused_whatever_its_type():
    for one in (RECORD, bytearray(RECORD), memoryview(RECORD), np.bytes_(RECORD)):
        with pytest.raises(errors.InvalidArgumentError, match="got one record"):
            parse_example(one, SPEC)
