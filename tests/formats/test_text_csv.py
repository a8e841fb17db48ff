"""TextLineDataset (docs/tf-behaviour.md#text-line) and CsvDataset."""

import gzip

import numpy as np
import pytest

from jaxfeed.formats import CsvDataset, TextLineDataset
from jaxfeed.pipeline import errors
from jaxfeed.pipeline.testing import assert_resumes_everywhere


def write(tmp_path, name, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


@pytest.mark.parametrize("data,lines", [
    (b"x\r\ny", [b"x", b"y"]),
    (b"q\rr\n", [b"qr"]),
    (b"p\n\n", [b"p", b""]),
    (b"a\nbb\n\nccc", [b"a", b"bb", b"", b"ccc"]),
    (b"", []),
])
@pytest.mark.parametrize("buffer_size", [None, 1])
def test_text_lines_follow_tf_data(tmp_path, data, lines, buffer_size):
    assert list(TextLineDataset(write(tmp_path, "t.txt", data), buffer_size=buffer_size)) == lines


def test_text_gzip_and_zlib(tmp_path):
    import zlib

    data = b"one\ntwo\r\nthree\n"
    gz = write(tmp_path, "t.gz", gzip.compress(data))
    zz = write(tmp_path, "t.zz", zlib.compress(data))
    assert list(TextLineDataset(gz, "GZIP")) == list(TextLineDataset(zz, "ZLIB")) == [b"one", b"two", b"three"]


def test_text_resumes_at_every_line(tmp_path):
    names = [write(tmp_path, "a.txt", b"a\r\n\nbb\nccc"), write(tmp_path, "b.txt", b"dd\n"),
             write(tmp_path, "c.gz", gzip.compress(b"e\nf\n"))]
    assert_resumes_everywhere(lambda: TextLineDataset(names[:2], buffer_size=2))
    assert_resumes_everywhere(lambda: TextLineDataset(names[2:], "GZIP", buffer_size=1))


def test_text_missing_file_is_not_found(tmp_path):
    with pytest.raises(errors.NotFoundError, match="missing.txt"):
        list(TextLineDataset(str(tmp_path / "missing.txt")))


CSV = b"id,score,name\n1,2.5,x\n,3,\"y,z\"\n4,,\n"


def test_csv_header_types_and_defaults(tmp_path):
    rows = list(CsvDataset(write(tmp_path, "c.csv", CSV), [np.int64(-1), 0.0, "none"], header=True))
    assert rows == [(1, np.float32(2.5), b"x"), (-1, np.float32(3.0), b"y,z"), (4, np.float32(0.0), b"none")]
    assert [type(v) for v in rows[0]] == [np.int64, np.float32, bytes]


def test_csv_python_int_default_is_int32_like_tensorflow(tmp_path):
    rows = list(CsvDataset(write(tmp_path, "c.csv", CSV), [0, "none"], header=True, select_cols=[0, 2]))
    assert rows[0][0].dtype == np.int32 and rows == [(1, b"x"), (0, b"y,z"), (4, b"none")]


def test_csv_exclude_cols(tmp_path):
    rows = list(CsvDataset(write(tmp_path, "c.csv", CSV), [0.0, "-"], header=True, exclude_cols=[0]))
    assert rows[0] == (np.float32(2.5), b"x")


def test_csv_missing_required_value_names_file_column_and_row(tmp_path):
    path = write(tmp_path, "c.csv", CSV)
    with pytest.raises(errors.InvalidArgumentError, match=r"c.csv row 1: Field 0 .*required"):
        list(CsvDataset(path, [np.int64, np.float32, str], header=True))


def test_csv_without_header_and_custom_delimiter_and_na(tmp_path):
    path = write(tmp_path, "c.tsv", b"1\tNA\n2\t3\n")
    assert list(CsvDataset(path, [np.int64, np.float64(9)], field_delim="\t", na_value="NA")) == [(1, 9.0), (2, 3.0)]


def test_csv_gzip(tmp_path):
    path = write(tmp_path, "c.csv.gz", gzip.compress(CSV))
    assert len(list(CsvDataset(path, [0, 0.0, ""], header=True, compression_type="GZIP"))) == 3


def test_csv_resumes_at_every_row(tmp_path):
    a = write(tmp_path, "a.csv", CSV)
    b = write(tmp_path, "b.csv", b"h1,h2,h3\n7,7,seven\n")
    assert_resumes_everywhere(lambda: CsvDataset([a, b], [0, 0.0, ""], header=True))


def test_csv_element_spec(tmp_path):
    ds = CsvDataset(write(tmp_path, "c.csv", CSV), [np.int64, 0.0, ""], header=True)
    assert [s.dtype for s in ds.element_spec] == [np.int64, np.float32, object]


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=40, deadline=None)
@given(st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"").replace(b"\r", b"")), max_size=20),
       st.booleans(), st.integers(1, 64))
def test_random_lines_round_trip(tmp_path_factory, lines, final_newline, buffer_size):
    data = b"\n".join(lines) + (b"\n" if final_newline and lines else b"")
    path = tmp_path_factory.mktemp("lines") / "t.txt"
    path.write_bytes(data)
    expected = lines if (final_newline or not lines or lines[-1] != b"") else lines[:-1]
    if not final_newline and lines == [b""]:
        expected = []
    assert list(TextLineDataset(str(path), buffer_size=buffer_size)) == expected


def test_text_num_parallel_reads_takes_one_line_from_each_file_in_turn(tmp_path):
    a = write(tmp_path, "a.txt", b"a0\na1\na2\n")
    b = write(tmp_path, "b.txt", b"b0\n")
    assert list(TextLineDataset([a, b], num_parallel_reads=2)) == [b"a0", b"b0", b"a1", b"a2"]


def test_csv_from_memory_filesystem():
    import fsspec

    with fsspec.open("memory://jaxfeed-csv/c.csv", "wb") as f:
        f.write(CSV)
    assert len(list(CsvDataset("memory://jaxfeed-csv/c.csv", [0, 0.0, ""], header=True))) == 3


def test_csv_quoted_delimiters_in_the_first_line_do_not_confuse_the_column_count(tmp_path):
    path = write(tmp_path, "q.csv", b'"a,b",1\n"c",2\n')
    assert list(CsvDataset(path, ["", 0], exclude_cols=[])) == [(b"a,b", 1), (b"c", 2)]


def test_csv_select_cols_beyond_the_file_is_an_error_naming_it(tmp_path):
    path = write(tmp_path, "n.csv", b"1,2\n")
    with pytest.raises(errors.InvalidArgumentError, match="n.csv"):
        list(CsvDataset(path, [0], select_cols=[5]))
