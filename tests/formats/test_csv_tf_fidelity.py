"""CsvDataset reads a file as tf.data.experimental.CsvDataset (TF 2.21) does: numbers with TF's syntax, an
empty line as a record, quoted fields keeping their newlines, an empty field (quoted or not) as missing,
quotes out of place refused -- on both readers (pyarrow's blocks and the row-by-row one). Every expected
value and error below is what TF 2.21 gave for the same file (found by the differential fuzzer,
tests/formats/fuzz_formats_differential.py, and checked by hand against TF)."""

import numpy as np
import pytest

from jaxfeed.formats import CsvDataset
from jaxfeed.pipeline.errors import InvalidArgumentError
from jaxfeed.pipeline.testing import assert_resumes_everywhere


def _file(tmp_path, data: bytes, name="a.csv"):
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def _read(path, defaults, **kw):
    """(rows, error or None): the rows before the first error, then that error."""
    rows, it = [], iter(CsvDataset(path, defaults, **kw))
    while True:
        try:
            row = next(it)
        except StopIteration:
            return rows, None
        except InvalidArgumentError as error:
            return rows, error
        rows.append(tuple(v.item() if isinstance(v, np.generic) else v for v in row))


def _bits(values, dtype):
    return [hex(int(np.asarray(v, dtype).view({4: np.uint32, 8: np.uint64}[np.dtype(dtype).itemsize])))
            for v in values]


# ---------------------------------------------------------------------- B1: numbers with TF's syntax
@pytest.mark.parametrize("field,dtype", [
    (b"1_0", np.int32), ("\u0661\u0662".encode(), np.int32), ("\uff11\uff12".encode(), np.int32),
    (b"0x10", np.int32), (b"0x10", np.int64), (b" 0X1F", np.int32), (b"1e5", np.int32), (b"--1", np.int32),
    (b"2147483648", np.int32), (b"9223372036854775808", np.int64),
    (b"1_0.5", np.float32), ("\uff11".encode(), np.float32), (b"1d5", np.float64), (b"infinit", np.float32),
    (b"0x1p", np.float32), (b"nan(a b)", np.float32), (b" ", np.float32),
])
def test_numbers_tf_refuses_are_errors_naming_file_row_and_field(tmp_path, field, dtype):
    # TF: "Field 0 in record is not a valid int32: 1_0" (after the rows before it)
    path = _file(tmp_path, b"7\n" + field + b"\n8\n")
    rows, error = _read(path, [dtype])
    assert rows == [(7,)]
    assert isinstance(error, InvalidArgumentError)
    assert "a.csv row 1: Field 0 (column 0) in record is not a valid" in str(error)
    assert f"{np.dtype(dtype).name}: {field.decode()!r}" in str(error)


def test_int_forms_tf_accepts(tmp_path):
    path = _file(tmp_path, b"+1\n \t2 \n\x0b3\n010\n-0\n")
    assert _read(path, [np.int32]) == ([(1,), (2,), (3,), (10,), (0,)], None)


def test_float_forms_tf_accepts(tmp_path):
    path = _file(tmp_path, b"0x1p3\n1e5\nInfinity\n-inf\n 2.5 \n0x.8\n1e40\n+.5\n")
    rows, error = _read(path, [np.float32])
    assert error is None
    assert [r[0] for r in rows] == [8.0, 100000.0, np.inf, -np.inf, 2.5, 0.5, np.inf, 0.5]


@pytest.mark.parametrize("lead", [b"", b"x,"])  # pyarrow's reader, and the row-by-row one (x: not an int)
def test_nan_sign_and_payload_are_kept(tmp_path, lead):
    # TF (glibc strtof/strtod): nan(123) keeps 123 in the mantissa, -nan the sign bit
    data = b"1.5,1.5\nnan(123),nan(0x7b)\n-nan,-nan(5)\nnan,NAN(12)\n"
    rows, error = _read(_file(tmp_path, data), [np.float32, np.float64])
    assert error is None
    assert _bits([r[0] for r in rows], np.float32) == ["0x3fc00000", "0x7fc0007b", "0xffc00000", "0x7fc00000"]
    assert _bits([r[1] for r in rows], np.float64) == ["0x3ff8000000000000", "0x7ff800000000007b",
                                                        "0xfff8000000000005", "0x7ff800000000000c"]
    if lead:  # the same in a file read row by row
        rows, error = _read(_file(tmp_path, data + b"x,1\n", "b.csv"), [np.float32, np.float64])
        assert _bits([r[0] for r in rows], np.float32)[1:3] == ["0x7fc0007b", "0xffc00000"]
        assert "b.csv row 4" in str(error)


def test_float32_rounds_once_from_the_text(tmp_path):
    # a halfway float64 rounded again to float32 would give 1.0; TF's strtof gives the next float32
    data = b"1.00000005960464477539062500001\n0x1.0000010000000000001p0\n0x1.000001p0\nx\n"
    rows, error = _read(_file(tmp_path, data), [np.float32])
    assert _bits([r[0] for r in rows], np.float32) == ["0x3f800001", "0x3f800001", "0x3f800000"]
    assert "row 3" in str(error)


# ---------------------------------------------------------------------- B2: an empty line is a record
def test_an_empty_line_is_a_record_of_one_empty_field(tmp_path):
    assert _read(_file(tmp_path, b"1\n\n2\n"), [7]) == ([(1,), (7,), (2,)], None)
    assert _read(_file(tmp_path, b"1\r\n\r\n2\r\n"), [7]) == ([(1,), (7,), (2,)], None)
    assert _read(_file(tmp_path, b"\n"), [7]) == ([(7,)], None)
    assert _read(_file(tmp_path, b"\r\n"), [7]) == ([(7,)], None)
    assert _read(_file(tmp_path, b"1\n2\n\n"), [7]) == ([(1,), (2,), (7,)], None)  # a trailing empty line too
    assert _read(_file(tmp_path, b"1\n2\n\n\n"), [7]) == ([(1,), (2,), (7,), (7,)], None)
    assert _read(_file(tmp_path, b"1\r\r2\n"), [7]) == ([(1,), (7,), (2,)], None)
    assert _read(_file(tmp_path, b"h\n\n1\n"), [7], header=True) == ([(7,), (1,)], None)
    assert _read(_file(tmp_path, b"1,2,3\n\n"), [7], select_cols=[0]) == ([(1,), (7,)], None)


def test_an_empty_line_in_a_required_column_is_an_error_at_its_row(tmp_path):
    rows, error = _read(_file(tmp_path, b"1\n\n2\n"), [np.int32])
    assert rows == [(1,)]
    assert "a.csv row 1: Field 0 (column 0) is required but missing in record" in str(error)
    ds = CsvDataset(_file(tmp_path, b"1\n\n2\n"), [np.int32]).ignore_errors()
    assert [int(r[0]) for r in ds] == [1, 2]


def test_an_empty_line_among_several_columns_is_a_short_record(tmp_path):
    # TF: "Expect 2 fields but have 1 in record" (pyarrow alone would fill both defaults)
    for data, kw in [(b"1,2\n\n3,4\n", {}), (b"1,2\n\n3,4\n", {"select_cols": [0, 1]}),
                     (b"h,h2\n1,2\n\n", {"header": True}), (b"1,2,3\n\n4,5,6\n", {"exclude_cols": [1]})]:
        rows, error = _read(_file(tmp_path, data), [7, 8], **kw)
        assert rows == [(1, 2)] if "exclude_cols" not in kw else [(1, 3)], (data, kw)
        assert "row 1: Expect 2 fields but have 1 in record" in str(error), (data, kw)
    rows, error = _read(_file(tmp_path, b"1,2\n\n"), [7, 8], header=True)  # the first data line is empty
    assert rows == [] and "row 0: Expect 2 fields but have 1 in record" in str(error)
    rows, error = _read(_file(tmp_path, b"1,2,3\n\n"), [7], select_cols=[1])
    assert rows == [(2,)] and "row 1: Expect 1 fields but have 0 in record" in str(error)
    ds = CsvDataset(_file(tmp_path, b"1,2\n\n3,4\n"), [7, 8]).ignore_errors()
    assert [tuple(map(int, r)) for r in ds] == [(1, 2), (3, 4)]


def test_empty_file(tmp_path):
    assert _read(_file(tmp_path, b""), [7]) == ([], None)
    rows, error = _read(_file(tmp_path, b""), [7], header=True)
    assert rows == [] and "a.csv row 0: Can't read header of file" in str(error)
    assert _read(_file(tmp_path, b"h"), [7], header=True) == ([], None)


# ---------------------------------------------------------------------- B3: quoted newlines are kept
def test_a_quoted_field_keeps_its_newline_in_the_row_by_row_reader(tmp_path):
    rows, error = _read(_file(tmp_path, b'"multi\nline",1\n2,x\n'), [str, np.int32])
    assert rows == [(b"multi\nline", 1)]
    assert "a.csv row 1: Field 1 (column 1) in record is not a valid int32: 'x'" in str(error)
    ds = CsvDataset(_file(tmp_path, b'"multi\nline",1\n2,x\n3,4\n'), [str, np.int32]).ignore_errors()
    assert [(a, int(b)) for a, b in ds] == [(b"multi\nline", 1), (b"3", 4)]


@pytest.mark.parametrize("tail", [b"", b"x,y\n"])  # pyarrow's reader, and the row-by-row one
def test_quoted_newlines_and_carriage_returns(tmp_path, tail):
    data = b'"multi\r\nline",1\n2,3\n"a\rb",4\n"a\n\nb",5\n' + tail
    rows, error = _read(_file(tmp_path, data), [str, np.int32])
    assert rows == [(b"multi\r\nline", 1), (b"2", 3), (b"a\rb", 4), (b"a\n\nb", 5)]
    assert (error is None) == (not tail)


def test_a_header_is_a_record_so_it_may_hold_a_quoted_newline(tmp_path):
    assert _read(_file(tmp_path, b'"h\n1",x\n1,2\n'), [7, 8], header=True) == ([(1, 2)], None)
    assert _read(_file(tmp_path, b"\n1\n"), [7], header=True) == ([(1,)], None)


def test_without_quoting_quotes_and_newlines_are_plain(tmp_path):
    data = b'"multi\nline"\n'
    assert _read(_file(tmp_path, data), [str], use_quote_delim=False) == ([(b'"multi',), (b'line"',)], None)


# ---------------------------------------------------------------------- B4: an empty field is missing
def test_a_quoted_empty_field_is_missing(tmp_path):
    assert _read(_file(tmp_path, b'"",1\n'), ["d", np.int32]) == ([(b"d", 1)], None)
    assert _read(_file(tmp_path, b'"",1\n'), [5, np.int32]) == ([(5, 1)], None)
    rows, error = _read(_file(tmp_path, b'"",1\n'), [str, np.int32])
    assert rows == [] and "a.csv row 0: Field 0 (column 0) is required but missing in record" in str(error)


def test_a_quoted_na_value_is_missing(tmp_path):
    assert _read(_file(tmp_path, b'"NA"\n'), ["d"], na_value="NA") == ([(b"d",)], None)
    assert _read(_file(tmp_path, b'"NA",1\n'), [5, np.int32], na_value="NA") == ([(5, 1)], None)
    rows, error = _read(_file(tmp_path, b'1\n"NA"\n'), [str], na_value="NA")
    assert rows == [(b"1",)] and "row 1: Field 0 (column 0) is required but missing" in str(error)


def test_an_empty_field_is_missing_whatever_na_value_is(tmp_path):
    assert _read(_file(tmp_path, b",1\n"), ["d", np.int32], na_value="NA") == ([(b"d", 1)], None)
    rows, error = _read(_file(tmp_path, b",1\n"), [str, np.int32], na_value="NA")
    assert rows == [] and "Field 0 (column 0) is required but missing" in str(error)


def test_without_quoting_quotes_are_field_bytes(tmp_path):
    assert _read(_file(tmp_path, b'"",1\n'), ["d", np.int32], use_quote_delim=False) == ([(b'""', 1)], None)
    assert _read(_file(tmp_path, b'"NA"\n'), ["d"], na_value="NA", use_quote_delim=False) == ([(b'"NA"',)], None)


# ---------------------------------------------------------------------- B5: quotes out of place
@pytest.mark.parametrize("data,defaults,rows,why", [
    (b'a"b\n', [str], [], 'column 0: Unquoted fields cannot have quotes inside'),
    (b'1\na"b\n2\n', [str], [(b"1",)], 'row 1: column 0: Unquoted fields cannot have quotes inside'),
    (b'1, "b"\n', [str, str], [], 'row 0: column 1: Unquoted fields cannot have quotes inside'),
    (b'1,a"b\n', [np.int32], [], 'row 0: column 1: Unquoted fields cannot have quotes inside'),  # select_cols
    (b'"x"y\n', [str], [], 'row 0: column 0: Reached end of file without closing quoted field in record'),
    (b'"1"2\n', [np.int32], [], 'Reached end of file without closing quoted field in record'),
    (b'1,2\n"abc', [np.int32, np.int32], [(1, 2)], 'row 1: column 0: Reached end of file without closing'),
    (b'1\n"x"y,"z"\n2\n', [str], [(b"1",)],
     'row 1: column 0: Quote inside a string has to be escaped by another quote'),
])
def test_quotes_out_of_place_are_errors_after_the_rows_before(tmp_path, data, defaults, rows, why):
    kw = {"select_cols": [0]} if data == b'1,a"b\n' else {}
    got, error = _read(_file(tmp_path, data), defaults, **kw)
    assert got == rows
    assert isinstance(error, InvalidArgumentError)
    assert ("a.csv " + why if why.startswith("row") else why) in str(error)


def test_ignore_errors_skips_only_the_record_with_the_bad_quote(tmp_path):
    for data in (b'1\na"b\n2\n', b'1\n"x"y,"z"\n2\n'):
        assert list(CsvDataset(_file(tmp_path, data), [str]).ignore_errors()) == [(b"1",), (b"2",)]
    assert list(CsvDataset(_file(tmp_path, b'"a""b",1\n'), [str, np.int32])) == [(b'a"b', 1)]


def test_a_bad_header_is_an_error_then_the_records(tmp_path):
    path = _file(tmp_path, b'h"q\n1\n2\n')
    rows, error = _read(path, [np.int32], header=True)
    assert rows == [] and "a.csv row 0: Can't read header of file" in str(error)
    assert [int(r[0]) for r in CsvDataset(path, [np.int32], header=True).ignore_errors()] == [1, 2]


# ---------------------------------------------------------------------- both readers resume
@pytest.mark.parametrize("data,defaults,kw", [
    (b'"multi\nline",1\n2,x\n3,4\n\n5,6\n', [str, np.int32], {}),
    (b'h\n1\n\n2\nx\n3\n', [7], {"header": True}),
    (b'1\na"b\n"c\n\nd"\n""\n', ["d"], {}),
])
def test_row_by_row_reading_resumes_everywhere(tmp_path, data, defaults, kw):
    path = _file(tmp_path, data)
    assert_resumes_everywhere(lambda: CsvDataset(path, defaults, **kw).ignore_errors())


def test_a_restore_before_a_bad_row_in_a_later_block_delivers_the_rows_then_its_error(tmp_path):
    # pyarrow reads 1 MiB blocks: the bad row sits in the second one (this restore raised pyarrow's block error)
    lines = [b"%d,%s" % (i, b"x" * 90) for i in range(15_000)]
    lines[14_000] = b"bad," + b"x" * 90
    path = _file(tmp_path, b"\n".join(lines) + b"\n")
    ds = CsvDataset(path, [np.int32, str])
    it = ds.make_iterator()
    for _ in range(13_000):
        next(it)
    rows, restored = [], ds.make_iterator(state=it.get_state())
    with pytest.raises(InvalidArgumentError, match=r"a.csv row 14000: Field 0 .*not a valid int32: 'bad'"):
        for row in restored:
            rows.append(int(row[0]))
    assert rows == list(range(13_000, 14_000))


@pytest.mark.parametrize("cut", ["trailer", "half"])
def test_a_cut_gzip_file_gives_its_rows_before_the_cut_then_data_loss(tmp_path, cut):
    """Found by differential fuzzing: the whole file was read before parsing, so a GZIP stream missing only
    its trailer gave no row at all (TF: all 100). Now the rows wholly before the damage come first (a row cut
    by it is dropped), then DataLossError naming the file, as TFRecord and text files give it."""
    import gzip

    from jaxfeed.pipeline.errors import DataLossError

    text = b"".join(b"%d,%d\n" % (i, i * 2) for i in range(100))
    packed = gzip.compress(text)
    path = tmp_path / "rows.csv.gz"
    path.write_bytes(packed[:-8] if cut == "trailer" else packed[:len(packed) // 2])
    ds = CsvDataset(str(path), [np.int32, np.int32], compression_type="GZIP")
    got = []
    with pytest.raises(DataLossError, match="rows.csv.gz"):
        for a, b in ds:
            got.append((int(a), int(b)))
    assert got == [(i, i * 2) for i in range(len(got))] and (len(got) == 100 if cut == "trailer" else got)
    assert len(list(ds.ignore_errors())) == len(got)
