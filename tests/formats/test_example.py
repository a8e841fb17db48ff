"""tf.train.Example / SequenceExample parsing against what TensorFlow wrote and parsed."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxfeed.formats import (Example, FixedLenFeature, FixedLenSequenceFeature, TFRecordDataset, VarLenFeature,
                             VarLenValue, make_example, make_sequence_example, parse_example,
                             parse_sequence_example, parse_single_example, parse_single_sequence_example)
from jaxfeed.pipeline import errors

SPEC = {
    "id": FixedLenFeature([], np.int64),
    "label": FixedLenFeature([], "int64"),
    "score": FixedLenFeature([], np.float32),
    "embedding": FixedLenFeature([4], np.float32),
    "tokens": VarLenFeature(np.int64),
    "text": FixedLenFeature([], "string"),
    "missing_with_default": FixedLenFeature([2], np.int64, default_value=[7, 8]),
}


@pytest.fixture(scope="module")
def examples(data_dir):
    return list(TFRecordDataset([str(data_dir / "examples-0.tfrecord"), str(data_dir / "examples-1.tfrecord")]))


def test_parse_example_matches_tensorflows_result_for_the_first_four(examples, manifest):
    got = parse_example(examples[:4], SPEC)
    want = manifest["parse_example_first4"]["result"]
    for name, entry in want.items():
        if entry.get("sparse"):
            indices, values, dense_shape = got[name].to_sparse()
            assert indices.tolist() == entry["indices"]
            assert values.tolist() == entry["values"]
            assert dense_shape.tolist() == entry["dense_shape"]
        elif entry["dtype"] == "object":
            assert got[name].tolist() == [v.encode() for v in entry["value"]]
        else:
            assert got[name].dtype == np.dtype(entry["dtype"]) and list(got[name].shape) == entry["shape"]
            np.testing.assert_array_equal(got[name], np.array(entry["value"], dtype=entry["dtype"]))


def test_every_example_matches_the_manifest(examples, manifest):
    got = parse_example(np.array(examples, dtype=object), SPEC)
    for i, want in enumerate(manifest["examples"]):
        assert got["id"][i] == want["id"]["value"][0]
        np.testing.assert_array_equal(got["embedding"][i], np.float32(want["embedding"]["value"]))
        assert got["tokens"].to_list()[i].tolist() == want["tokens"]["value"]
        assert got["text"][i] == want["text"]["value"][0].encode()


def test_parse_single_example_has_no_batch_dimension(examples, manifest):
    one = parse_single_example(examples[5], SPEC)
    assert one["id"] == 5 and one["embedding"].shape == (4,)
    assert one["tokens"].tolist() == manifest["examples"][5]["tokens"]["value"]


def test_parse_after_batch_in_a_pipeline(data_dir):
    ds = TFRecordDataset(str(data_dir / "examples-0.tfrecord")).batch(10).map(lambda b: parse_example(b, {
        "id": FixedLenFeature([], np.int64)})["id"])
    assert np.concatenate(list(ds)).tolist() == list(range(32))


def test_sequence_examples_match_the_manifest(data_dir, manifest):
    records = list(TFRecordDataset(str(data_dir / "sequences.tfrecord")))
    context, seqs, lengths = parse_sequence_example(
        records, {"length": FixedLenFeature([], np.int64)},
        {"frames": FixedLenSequenceFeature([3], np.float32), "words": FixedLenSequenceFeature([], "string")})
    for i, want in enumerate(manifest["sequences"]):
        n = want["context"]["length"][0]
        assert context["length"][i] == n and lengths["frames"][i] == n
        np.testing.assert_array_equal(seqs["frames"][i, :n], np.float32(want["frames"]))
        assert seqs["words"][i, :n].tolist() == [w[0].encode() for w in want["words"]]
        assert (seqs["frames"][i, n:] == 0).all()


def test_parse_single_sequence_example(data_dir, manifest):
    record = next(iter(TFRecordDataset(str(data_dir / "sequences.tfrecord"))))
    context, seqs = parse_single_sequence_example(record, {"length": FixedLenFeature([], np.int64)},
                                                  {"frames": FixedLenSequenceFeature([3], np.float32)})
    assert context["length"] == 5 and seqs["frames"].shape == (5, 3)


def test_missing_required_feature_names_feature_and_record():
    records = [make_example({"a": [1]}).SerializeToString(), make_example({}).SerializeToString()]
    with pytest.raises(errors.InvalidArgumentError, match=r"'a'.*record 1"):
        parse_example(records, {"a": FixedLenFeature([], np.int64)})


def test_wrong_type_names_feature_and_record():
    records = [make_example({"a": [1.5]}).SerializeToString()]
    with pytest.raises(errors.InvalidArgumentError, match=r"'a' of record 0 holds float_list"):
        parse_example(records, {"a": FixedLenFeature([], np.int64)})


def test_wrong_size_names_feature_and_record():
    records = [make_example({"a": [1, 2]}).SerializeToString(), make_example({"a": [1, 2, 3]}).SerializeToString()]
    with pytest.raises(errors.InvalidArgumentError, match=r"'a' of record 1 has 3 values"):
        parse_example(records, {"a": FixedLenFeature([2], np.int64)})


def test_undecodable_record_names_its_index():
    with pytest.raises(errors.InvalidArgumentError, match="record 1"):
        parse_example([make_example({}).SerializeToString(), b"\xff\xff\xff"], {})


def test_fixed_len_sequence_feature_in_parse_example_pads_rows():
    records = [make_example({"v": [1, 2, 3, 4]}).SerializeToString(), make_example({}).SerializeToString()]
    got = parse_example(records, {"v": FixedLenSequenceFeature([2], np.int64, allow_missing=True)})["v"]
    assert got.shape == (2, 2, 2) and got[0].tolist() == [[1, 2], [3, 4]] and (got[1] == 0).all()


def test_varlen_value_indices_and_dense_shape():
    v = VarLenValue(np.array([5, 6, 7]), np.array([0, 2, 2, 3]))
    assert v.indices.tolist() == [[0, 0], [0, 1], [2, 0]] and v.dense_shape.tolist() == [3, 2]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(-2**63, 2**63 - 1), max_size=5),
                          st.lists(st.floats(width=32, allow_nan=False), min_size=2, max_size=2),
                          st.binary(max_size=20)), min_size=1, max_size=10))
def test_random_examples_round_trip(rows):
    records = [make_example({"i": ints, "f": np.float32(fl), "b": [b]}).SerializeToString() for ints, fl, b in rows]
    got = parse_example(records, {"i": VarLenFeature(np.int64), "f": FixedLenFeature([2], np.float32),
                                  "b": FixedLenFeature([], "string")})
    assert [x.tolist() for x in got["i"].to_list()] == [ints for ints, _, _ in rows]
    np.testing.assert_array_equal(got["f"], np.float32([fl for _, fl, _ in rows]))
    assert got["b"].tolist() == [b for _, _, b in rows]


def test_builders_round_trip_sequence_examples():
    record = make_sequence_example({"n": [2]}, {"x": [[1.0], [2.0]]}).SerializeToString()
    context, seqs = parse_single_sequence_example(record, {"n": FixedLenFeature([], np.int64)},
                                                  {"x": FixedLenSequenceFeature([], np.float32)})
    assert context["n"] == 2 and seqs["x"].tolist() == [1.0, 2.0]
    assert Example.FromString(make_example({"e": []}).SerializeToString()).features.feature["e"].WhichOneof(
        "kind") == "int64_list"


def test_parse_after_batch_keeps_varlen_values_and_resumes(data_dir):
    from jaxfeed.pipeline.testing import assert_resumes_everywhere

    names = [str(data_dir / "examples-0.tfrecord"), str(data_dir / "examples-1.tfrecord")]
    spec = {"id": FixedLenFeature([], np.int64), "tokens": VarLenFeature(np.int64)}
    ds = TFRecordDataset(names).batch(10).map(lambda b: parse_example(b, spec))
    batches = assert_resumes_everywhere(lambda: ds)
    assert isinstance(batches[0]["tokens"], VarLenValue) and batches[0]["tokens"].row_splits[0] == 0
    assert np.concatenate([b["id"] for b in batches]).tolist() == list(range(64))


def test_wrong_type_in_a_feature_list_step_names_step_feature_and_record():
    good = make_sequence_example({}, {"x": [[1.0]]}).SerializeToString()
    bad = make_sequence_example({}, {"x": [[1.0], [2]]}).SerializeToString()
    with pytest.raises(errors.InvalidArgumentError, match=r"step 1 of feature list 'x' in record 1 holds int64_list"):
        parse_sequence_example([good, bad], None, {"x": FixedLenSequenceFeature([], np.float32)})


def test_varlen_sequence_feature_gives_values_over_all_steps():
    record = make_sequence_example({}, {"t": [[1, 2], [], [3]]}).SerializeToString()
    _, seqs, lengths = parse_sequence_example([record, record], None, {"t": VarLenFeature(np.int64)})
    assert lengths["t"].tolist() == [3, 3]
    assert [v.tolist() for v in seqs["t"].to_list()] == [[1, 2], [], [3]] * 2
