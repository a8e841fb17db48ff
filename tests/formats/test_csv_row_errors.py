"""CsvDataset's bad rows as tf.data reports them: the rows before a bad one first, the error naming its
row, ``ignore_errors`` skipping only that row, rows wider than ``record_defaults`` refused, numpy defaults
keeping their dtype (each of these failed before; the conformance goldens found them)."""

import numpy as np
import pytest

from jaxfeed.formats import CsvDataset
from jaxfeed.pipeline.errors import InvalidArgumentError


def _file(tmp_path, text, name="a.csv"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_the_rows_before_a_bad_row_come_first_then_its_error(tmp_path):
    it = iter(CsvDataset(_file(tmp_path, "1,x\n2,y\nbad,z\n4,w\n"), [np.int64, b""]))
    assert [int(next(it)[0]), int(next(it)[0])] == [1, 2]
    with pytest.raises(InvalidArgumentError, match=r"a.csv row 2: .*not a valid int64: 'bad'"):
        next(it)


def test_ignore_errors_skips_only_the_bad_rows(tmp_path):
    ds = CsvDataset(_file(tmp_path, "1,x\nbad,y\n3,z\n,w\n5,v\n"), [np.int64, b""]).ignore_errors()
    assert [(int(a), b) for a, b in ds] == [(1, b"x"), (3, b"z"), (5, b"v")]


def test_a_missing_required_field_is_located_and_skippable(tmp_path):
    path = _file(tmp_path, "1,2\n3,\n5,6\n")
    with pytest.raises(InvalidArgumentError, match="row 1: Field 1 .* required but missing"):
        list(CsvDataset(path, [np.int32, np.int32]))
    assert [tuple(map(int, r)) for r in CsvDataset(path, [np.int32, np.int32]).ignore_errors()] == [(1, 2), (5, 6)]


def test_rows_wider_than_record_defaults_are_refused_unless_columns_are_selected(tmp_path):
    path = _file(tmp_path, "1,2,3\n4,5,6\n")
    with pytest.raises(InvalidArgumentError, match="Expect 2 fields but have more in record"):
        list(CsvDataset(path, [0, 0]))
    assert [tuple(map(int, r)) for r in CsvDataset(path, [0, 0], select_cols=[0, 2])] == [(1, 3), (4, 6)]


def test_numpy_defaults_keep_their_dtype(tmp_path):
    path = _file(tmp_path, "1,\n,2\n")
    rows = list(CsvDataset(path, [np.array([7], np.int64), [np.int64(9)]]))
    assert [tuple(map(int, r)) for r in rows] == [(1, 9), (7, 2)]
    assert {type(v) for r in rows for v in r} == {np.int64}
    assert [d.dtype for d in CsvDataset(path, [[7], 7.5]).element_spec] == [np.int32, np.float32]


def test_a_restore_after_a_bad_row_goes_on_after_it(tmp_path):
    ds = CsvDataset(_file(tmp_path, "1\nbad\n3\n4\n"), [np.int64]).ignore_errors()
    it = ds.make_iterator()
    assert [int(next(it)[0]), int(next(it)[0])] == [1, 3]
    assert [int(r[0]) for r in ds.make_iterator(state=it.get_state())] == [4]
