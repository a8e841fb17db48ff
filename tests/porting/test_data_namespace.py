"""``jaxfeed.data`` / ``jaxfeed.data.experimental``: tf.data's names, each doing what tf.data's does."""

import gzip

import numpy as np
import pytest

import jaxfeed.data as tfdata
import jaxfeed.data.experimental as E
from jaxfeed.formats import TFRecordWriter, FixedLenFeature, VarLenFeature, make_example
from jaxfeed.pipeline.errors import DataLossError, FailedPreconditionError, InvalidArgumentError


def test_the_namespace_has_tf_datas_names():
    for name in ["Dataset", "Options", "TFRecordDataset", "TextLineDataset", "FixedLengthRecordDataset", "AUTOTUNE",
                 "INFINITE_CARDINALITY", "UNKNOWN_CARDINALITY", "DatasetSpec", "experimental"]:
        assert hasattr(tfdata, name), name
    for name in ["AUTOTUNE", "Counter", "CsvDataset", "make_csv_dataset", "make_batched_features_dataset",
                 "AutoShardPolicy", "ExternalStatePolicy", "DistributeOptions", "ThreadingOptions", "cardinality",
                 "assert_cardinality", "scan", "group_by_window", "bucket_by_sequence_length", "unique",
                 "ignore_errors", "take_while", "sample_from_datasets", "choose_from_datasets",
                 "parallel_interleave", "map_and_batch", "get_single_element", "INFINITE", "UNKNOWN",
                 "dense_to_ragged_batch", "dense_to_sparse_batch", "rejection_resample", "save", "load", "snapshot",
                 "enable_debug_mode", "service"]:
        assert hasattr(E, name), name


# ---------------------------------------------------------------------------------- apply() forms
def test_apply_forms_equal_the_methods():
    ds = tfdata.Dataset.range(12)
    zero = np.int64(0)
    assert ds.apply(E.scan(zero, lambda s, x: (s + x, s))).as_numpy() == ds.scan(zero, lambda s, x: (s + x, s)).as_numpy()
    assert [int(x) for x in tfdata.Dataset.from_tensor_slices([1, 1, 2, 3, 2]).apply(E.unique())] == [1, 2, 3]
    assert [int(x) for x in ds.apply(E.take_while(lambda x: x < 4))] == [0, 1, 2, 3]
    assert [int(x) for x in ds.map(lambda x: 12 // int(x - 2)).apply(E.ignore_errors())] == \
        [12 // (x - 2) for x in range(12) if x != 2]
    windows = ds.apply(E.group_by_window(lambda x: x % 2, lambda k, w: w.batch(3), window_size=3)).as_numpy()
    assert [w.tolist() for w in windows] == [[0, 2, 4], [1, 3, 5], [6, 8, 10], [7, 9, 11]]
    lengths = tfdata.Dataset.range(1, 7).map(lambda x: np.ones(x, np.int64))
    bucket = (lambda x: len(x), [3], [2, 2])
    assert [b.shape for b in lengths.apply(E.bucket_by_sequence_length(*bucket))] == \
        [b.shape for b in lengths.bucket_by_sequence_length(*bucket)]
    pairs = ds.apply(E.enumerate_dataset(5)).take(2).as_numpy()
    assert [(int(i), int(x)) for i, x in pairs] == [(5, 0), (6, 1)]


def test_map_and_batch_is_map_then_batch():
    got = tfdata.Dataset.range(10).apply(E.map_and_batch(lambda x: x * 2, 4, drop_remainder=True)).as_numpy()
    assert [b.tolist() for b in got] == [[0, 2, 4, 6], [8, 10, 12, 14]]
    with pytest.raises(ValueError):
        E.map_and_batch(lambda x: x, 4, num_parallel_batches=1, num_parallel_calls=2)


def test_parallel_interleave_keeps_interleaves_order():
    ds = tfdata.Dataset.range(3)
    fn = lambda x: tfdata.Dataset.from_tensors(x).repeat(2)  # noqa: E731
    assert [int(v) for v in ds.apply(E.parallel_interleave(fn, cycle_length=2))] == \
        [int(v) for v in ds.interleave(fn, cycle_length=2, block_length=1)]


def test_counter_counts_forever_from_start_by_step():
    ds = E.Counter(3, 2)
    assert ds.cardinality() == tfdata.INFINITE_CARDINALITY
    assert [int(x) for x in ds.take(3)] == [3, 5, 7]
    assert ds.element_spec.dtype == np.int64
    assert E.cardinality(ds) == E.INFINITE


def test_sample_and_choose_functions():
    a, b = tfdata.Dataset.from_tensors(0).repeat(3), tfdata.Dataset.from_tensors(1).repeat(3)
    chosen = E.choose_from_datasets([a, b], tfdata.Dataset.from_tensor_slices(np.array([0, 1, 1, 0], np.int64)))
    assert [int(x) for x in chosen] == [0, 1, 1, 0]
    sampled = [int(x) for x in E.sample_from_datasets([a, b], seed=3)]
    assert sorted(sampled) == [0, 0, 0, 1, 1, 1]


def test_get_single_element():
    assert int(E.get_single_element(tfdata.Dataset.from_tensors(7))) == 7
    with pytest.raises(InvalidArgumentError):
        E.get_single_element(tfdata.Dataset.range(2))


# ---------------------------------------------------------------------------------- assert_cardinality
def test_assert_cardinality_gives_an_unknown_length_a_length():
    ds = tfdata.Dataset.range(10).filter(lambda x: x % 2 == 0)
    assert ds.cardinality() == tfdata.UNKNOWN_CARDINALITY
    asserted = ds.apply(E.assert_cardinality(5))
    assert asserted.cardinality() == 5 and len(asserted) == 5
    assert [int(x) for x in asserted] == [0, 2, 4, 6, 8]


def test_assert_cardinality_raises_after_the_asserted_elements_when_there_are_more():
    it = iter(tfdata.Dataset.range(10).filter(lambda x: x % 2 == 0).apply(E.assert_cardinality(2)))
    assert [int(next(it)), int(next(it))] == [0, 2]
    with pytest.raises(FailedPreconditionError, match="expected to contain 2 elements but contained at least 3"):
        next(it)


def test_assert_cardinality_raises_at_the_end_when_there_are_fewer():
    ds = tfdata.Dataset.range(10).filter(lambda x: x < 3).apply(E.assert_cardinality(4))
    with pytest.raises(FailedPreconditionError, match="expected to contain 4 elements but contained only 3"):
        list(ds)
    infinite = tfdata.Dataset.range(1).filter(lambda x: True).apply(E.assert_cardinality(E.INFINITE))
    with pytest.raises(FailedPreconditionError, match="an infinite number of elements but contained only 1 element"):
        list(infinite)


def test_assert_cardinality_is_a_dataset_method_too():
    ds = tfdata.Dataset.range(10).filter(lambda x: x < 4).assert_cardinality(4)
    assert len(ds) == 4 and [int(x) for x in ds] == [0, 1, 2, 3]


def test_assert_cardinality_checks_a_known_cardinality_at_once():
    with pytest.raises(FailedPreconditionError):
        tfdata.Dataset.range(3).apply(E.assert_cardinality(4))


def test_assert_cardinality_resumes_with_its_count():
    ds = tfdata.Dataset.range(6).filter(lambda x: True).apply(E.assert_cardinality(6))
    it = ds.make_iterator()
    [next(it) for _ in range(4)]
    rest = ds.make_iterator(state=it.get_state())
    assert [int(x) for x in rest] == [4, 5]


# ---------------------------------------------------------------------------------- FixedLengthRecordDataset
def _write(path, data, compression=None):
    opener = gzip.open if compression == "GZIP" else open
    with opener(path, "wb") as f:
        f.write(data)
    return str(path)


@pytest.mark.parametrize("compression", [None, "GZIP"])
def test_fixed_length_records_skip_header_and_footer(tmp_path, compression):
    body = bytes(range(40))
    name = _write(tmp_path / "f.bin", b"HDR" + body + b"FT", compression)
    ds = tfdata.FixedLengthRecordDataset(name, 8, header_bytes=3, footer_bytes=2, compression_type=compression)
    assert ds.as_numpy() == [body[i:i + 8] for i in range(0, 40, 8)]
    assert ds.element_spec == tfdata.experimental.Dataset.from_tensors(b"").element_spec


@pytest.mark.parametrize("compression", [None, "GZIP"])
def test_a_body_that_is_not_whole_records_is_an_error_naming_the_file(tmp_path, compression):
    name = _write(tmp_path / "f.bin", b"HDR" + bytes(40) + b"FT", compression)
    ds = tfdata.FixedLengthRecordDataset(name, 7, header_bytes=3, footer_bytes=2, compression_type=compression)
    # as TF 2.21: InvalidArgumentError where the file's size tells it, DataLossError where a compressed stream's end does
    error = InvalidArgumentError if compression is None else DataLossError
    with pytest.raises(error, match="f.bin.*body length 40 bytes.*record length \\(7 bytes\\)"):
        list(ds)


def test_fixed_length_records_resume_exactly(tmp_path):
    names = [_write(tmp_path / f"f{i}.bin", bytes([i]) * 32) for i in range(3)]
    ds = tfdata.FixedLengthRecordDataset(names, 4, buffer_size=8)
    want = ds.as_numpy()
    for k in range(len(want)):
        it = ds.make_iterator()
        got = [next(it) for _ in range(k)]
        got += list(ds.make_iterator(state=it.get_state()))
        assert got == want


def test_fixed_length_records_reject_bad_arguments(tmp_path):
    with pytest.raises(InvalidArgumentError):
        tfdata.FixedLengthRecordDataset("x", 0)
    with pytest.raises(InvalidArgumentError):
        tfdata.FixedLengthRecordDataset("x", 4, header_bytes=-1)


# ---------------------------------------------------------------------------------- make_csv_dataset
CSV = "id,big,score,name,label\n1,3000000000,0.5,ab,0\n2,4,1.5,cd,1\n3,5,,ef,1\n"


def test_make_csv_dataset_infers_types_as_tf_does(tmp_path):
    (tmp_path / "a.csv").write_text(CSV)
    ds = E.make_csv_dataset(str(tmp_path / "a.csv"), batch_size=2, label_name="label", shuffle=False, num_epochs=1)
    features, label = ds.element_spec
    assert list(features) == ["id", "big", "score", "name"]  # column order kept
    assert {k: s.dtype.name for k, s in features.items()} == \
        {"id": "int32", "big": "int64", "score": "float32", "name": "object"}
    (f1, l1), (f2, l2) = list(ds)
    assert f1["big"].tolist() == [3000000000, 4] and f1["name"].tolist() == [b"ab", b"cd"]
    assert l1.tolist() == [0, 1] and l2.tolist() == [1]
    assert f2["score"].tolist() == [0.0]  # an empty field takes the inferred default 0


def test_infer_column_types_never_narrows_again():
    from jaxfeed.formats.batched_readers import infer_column_types

    rows = [["1", "1.5", "x", "", "1e39"], ["2", "3", "4", "", "2"]]
    assert infer_column_types(rows, 5, "") == ["int32", "float32", "string", "string", "float64"]


def test_make_csv_dataset_selects_columns_and_repeats(tmp_path):
    (tmp_path / "a.csv").write_text(CSV)
    ds = E.make_csv_dataset(str(tmp_path / "a.csv"), batch_size=2, select_columns=["name", "id"], shuffle=False,
                            num_epochs=None)
    assert ds.cardinality() == tfdata.INFINITE_CARDINALITY
    first = [b["id"].tolist() for b in ds.take(3)]
    assert first == [[1, 2], [3, 1], [2, 3]]  # epochs run on; full batches only when infinite
    with pytest.raises(ValueError):
        E.make_csv_dataset(str(tmp_path / "a.csv"), batch_size=2, label_name="nope")


def test_make_csv_dataset_with_column_defaults_and_no_header(tmp_path):
    (tmp_path / "b.csv").write_text("1,x\n,y\n")
    ds = E.make_csv_dataset(str(tmp_path / "b.csv"), 2, column_names=["n", "s"], column_defaults=[[-1], [""]],
                            header=False, shuffle=False, num_epochs=1)
    (batch,) = list(ds)
    assert batch["n"].tolist() == [1, -1] and batch["s"].tolist() == [b"x", b"y"]


# ---------------------------------------------------------------------------------- make_batched_features_dataset
def test_make_batched_features_dataset_parses_examples(tmp_path):
    path = str(tmp_path / "e.tfrecord")
    with TFRecordWriter(path) as w:
        for i in range(5):
            w.write(make_example({"id": [i], "tags": list(range(i)), "label": [i % 2]}).SerializeToString())
    ds = E.make_batched_features_dataset(
        path, 2, {"id": FixedLenFeature([], np.int64), "tags": VarLenFeature(np.int64),
                  "label": FixedLenFeature([], np.int64)}, label_key="label", shuffle=False, num_epochs=1)
    batches = list(ds)
    assert [b[0]["id"].tolist() for b in batches] == [[0, 1], [2, 3], [4]]
    assert [b[1].tolist() for b in batches] == [[0, 1], [0, 1], [0]]
    assert "label" not in batches[0][0]
    with pytest.raises(ValueError):
        E.make_batched_features_dataset(path, 2, {"id": FixedLenFeature([], np.int64)}, label_key="x")


def test_experimental_save_load_and_snapshot(tmp_path):
    E.save(tfdata.Dataset.range(4), str(tmp_path / "s"))
    assert [int(x) for x in E.load(str(tmp_path / "s"))] == [0, 1, 2, 3]
    snap = tfdata.Dataset.range(3).apply(E.snapshot(str(tmp_path / "snap")))
    assert [int(x) for x in snap] == [0, 1, 2] == [int(x) for x in snap]


def test_options_take_tf_datas_experimental_spellings_and_list_their_fields():
    options = tfdata.Options()
    options.experimental_threading.max_intra_op_parallelism = 1
    options.experimental_deterministic = False
    options.experimental_optimization.map_fusion = False
    options.experimental_distribute.auto_shard_policy = E.AutoShardPolicy.DATA
    assert options.threading.max_intra_op_parallelism == 1 and options.deterministic is False
    assert options.experimental_threading is options.threading
    listed = dir(options)
    for field in ["autotune", "deterministic", "experimental_deterministic", "experimental_distribute",
                  "experimental_external_state_policy", "experimental_optimization", "experimental_slack",
                  "experimental_threading", "threading"]:
        assert field in listed
    with pytest.raises(AttributeError):
        options.experimental_no_such_option = 1


def test_at_from_list_get_structure_and_unbatch():
    ds = tfdata.Dataset.range(10)
    assert int(E.at(ds, 3)) == 3
    with pytest.raises(IndexError):
        E.at(ds, 10)
    listed = E.from_list([{"a": 1, "b": b"x"}, {"a": 2, "b": b"y"}])
    assert [(int(e["a"]), e["b"]) for e in listed] == [(1, b"x"), (2, b"y")]
    assert E.get_structure(listed) == listed.element_spec
    with pytest.raises(ValueError):
        E.from_list([(1, 2), (1,)])
    assert [int(x) for x in ds.batch(4).apply(E.unbatch())] == list(range(10))


def test_pad_to_cardinality_pads_dicts_and_marks_real_elements():
    ds = tfdata.Dataset.from_tensor_slices({"x": np.arange(3, dtype=np.int64), "s": np.array([b"a", b"b", b"c"],
                                                                                           dtype=object)})
    padded = ds.apply(E.pad_to_cardinality(5)).as_numpy()
    assert [int(e["x"]) for e in padded] == [0, 1, 2, 0, 0]
    assert [bool(e["valid"]) for e in padded] == [True, True, True, False, False]
    assert [e["s"] for e in padded] == [b"a", b"b", b"c", b"", b""]
    with pytest.raises(InvalidArgumentError):
        ds.apply(E.pad_to_cardinality(2))
    with pytest.raises(InvalidArgumentError):
        tfdata.Dataset.range(3).apply(E.pad_to_cardinality(5))


def test_tfrecord_writer_writes_a_dataset_of_strings(tmp_path):
    path = str(tmp_path / "w.tfrecord.gz")
    E.TFRecordWriter(path, "GZIP").write(tfdata.Dataset.from_tensor_slices(np.array([b"a", b"bc"], dtype=object)))
    assert tfdata.TFRecordDataset(path, "GZIP").as_numpy() == [b"a", b"bc"]
    with pytest.raises(InvalidArgumentError):
        E.TFRecordWriter(path).write(tfdata.Dataset.range(3))


def test_get_next_as_optional():
    it = iter(tfdata.Dataset.range(1))
    first, end = E.get_next_as_optional(it), E.get_next_as_optional(it)
    assert first.has_value() and int(first.get_value()) == 0 and not end.has_value()


@pytest.fixture
def debug_mode():
    from jaxfeed.pipeline.passes import debug_mode as switch

    yield switch
    switch.disable_debug_mode()


def test_debug_mode_runs_every_stage_on_the_consumers_thread_in_order(debug_mode):
    import threading

    seen = []

    def record(x):
        seen.append((int(x), threading.get_ident()))
        return x

    ds = tfdata.Dataset.range(20).map(record, num_parallel_calls=4).prefetch(3)
    E.enable_debug_mode()
    assert [int(x) for x in ds] == list(range(20))
    assert [x for x, _ in seen] == list(range(20)) and {t for _, t in seen} == {threading.get_ident()}
    assert "runs serially: debug mode" in ds.explain() and "Prefetch" in ds.explain().split("Rewrites:")[1]


def test_debug_mode_keeps_interleave_order(debug_mode):
    ds = tfdata.Dataset.range(4).interleave(lambda x: tfdata.Dataset.range(x), num_parallel_calls=2)
    want = [int(v) for v in ds]
    E.enable_debug_mode()
    assert [int(v) for v in ds] == want


def test_experimental_service_is_jaxfeed_service_without_importing_ray():
    import subprocess
    import sys

    code = ("import sys, jaxfeed.data.experimental as E, jaxfeed.service as S; "
            "assert E.service.distribute is S.distribute; assert 'ray' not in sys.modules")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
