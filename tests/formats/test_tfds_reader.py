"""``jaxfeed.formats.tfds`` over directories prepared by the real ``tensorflow_datasets`` (recorded by
``tests/formats/tfds_fixture/record_tfds_fixture.py``), compared with what TFDS itself decodes."""

import os

import numpy as np
import pytest

from jaxfeed.formats.tfds_reader import parse_split, tfds
from jaxfeed.pipeline.errors import InvalidArgumentError, NotFoundError

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "tfds")
EXPECTED = np.load(os.path.join(DATA, "expected.npz"))
SPLITS = ["train", "test", "train[:10%]", "train[5:9]+test[-2:]", "train[-30%:]"]


def _expected(name, split):
    rows = {}
    for key in EXPECTED.files:
        n, s, i, feature = key.split("|")
        if n == name and s == split:
            rows.setdefault(int(i), {})[feature] = EXPECTED[key]
    return [rows[i] for i in sorted(rows)]


def _flat(example, prefix=""):
    for k, v in example.items():
        if isinstance(v, dict):
            yield from _flat(v, f"{prefix}{k}/")
        else:
            yield f"{prefix}{k}", v


def _check(name, split, reference=None, dtypes=True):
    got = list(tfds(name, split=split, data_dir=DATA))
    want = _expected(reference or name, split)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        flat = dict(_flat(g))
        assert sorted(flat) == sorted(w)
        for key, value in w.items():
            if value.dtype.kind == "S":
                assert flat[key] == bytes(value) and type(flat[key]) is bytes, key
                continue
            if dtypes:
                assert np.asarray(flat[key]).dtype == value.dtype, key
            np.testing.assert_array_equal(flat[key], value, err_msg=key)


@pytest.mark.parametrize("split", SPLITS)
def test_tfrecord_shards_decode_as_tfds_decodes_them(split):
    _check("jaxfeed_tiny", split)


@pytest.mark.parametrize("split", SPLITS)
def test_array_record_shards_decode_as_tfds_decodes_them(split):
    pytest.importorskip("array_record.python.array_record_module")
    # the same examples as the TFRecord build: TFDS's tf.data decoding gives the dtypes; its numpy data source
    # (the only way TFDS reads ArrayRecord) returns Python floats and float64 empty lists, so only its values
    _check("jaxfeed_tiny_ar", split, reference="jaxfeed_tiny")
    _check("jaxfeed_tiny_ar", split, dtypes=False)


def test_cardinality_is_the_slices_length_and_versions_resolve():
    assert tfds("jaxfeed_tiny", "train[5:9]+test[-2:]", data_dir=DATA).cardinality() == 6
    assert tfds("jaxfeed_tiny:1.0.0", "test", data_dir=DATA).cardinality() == 5


def test_as_supervised_and_skip_decoding():
    image, label = next(iter(tfds("jaxfeed_tiny", "train", data_dir=DATA, as_supervised=True)))
    assert image.shape == (6, 5, 3) and image.dtype == np.uint8 and label.dtype == np.int64
    raw = next(iter(tfds("jaxfeed_tiny", "train", data_dir=DATA, skip_decoding={"image"})))
    assert isinstance(raw["image"], bytes) and raw["image"][:4] == b"\x89PNG"


def test_shuffled_files_keep_every_example_once():
    ids = sorted(int(e["id"]) for e in tfds("jaxfeed_tiny", "train", data_dir=DATA, shuffle_files=True, seed=3))
    assert ids == sorted(int(e["id"]) for e in tfds("jaxfeed_tiny", "train", data_dir=DATA))


def test_split_syntax_and_errors():
    assert parse_split("train[:10%]+test") == [("train", None, "10%"), ("test", None, None)]
    with pytest.raises(InvalidArgumentError):
        parse_split("train[::2]")
    with pytest.raises(InvalidArgumentError, match="no split"):
        tfds("jaxfeed_tiny", "validation", data_dir=DATA)
    with pytest.raises(NotFoundError):
        tfds("no_such_dataset", data_dir=DATA)
