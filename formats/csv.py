"""``CsvDataset`` (tf.data.experimental.CsvDataset) on ``pyarrow.csv``: each element is a tuple with one
scalar per selected column.

``record_defaults`` has one entry per selected column: a dtype (``np.int64``, ``"float32"``, ``str``/
``"string"``, ...) makes the column required, a value (or a one-element list) is its default and sets its
type (Python int -> int32, float -> float32, str/bytes -> string, as TensorFlow converts them). A field equal
to ``na_value`` (default: empty) takes the default; in a required column it is an error naming the file,
the column and the row. Strings are ``bytes``.

pyarrow parses a whole block of rows at once and each column becomes one numpy array per block; only the
final ``zip`` into row tuples is per row (and runs in C). The file is decompressed into memory first
(pyarrow reads from one buffer). State: (file, row index); restoring parses the file again and skips rows.

TF's syntax rules where pyarrow's differs: an empty line is a record of one empty field; an empty field,
quoted or not, is missing (the default, or an error if required), as is one equal to ``na_value``; a quoted
field keeps its newlines; a quote inside an unquoted field, or after a closing quote, is an error; numbers
are read as TF's strtol/strtod read them (no ``_``, no non-ASCII digits, no hex ints; hex floats, ``nan(n)``
and ``-nan`` kept bit for bit). A file where pyarrow's reading may differ -- a bad field, a quote out of
place, an empty line among several columns, a signed or payload NaN, a field like ``0x10`` with an int
column -- is read from that block on row by row (``_records``), with the rows before an error delivered and
the error naming the file, the row and the field.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from jaxfeed.pipeline import structure
from jaxfeed.pipeline.dataset import Dataset
from jaxfeed.pipeline.engine.registry import builds
from jaxfeed.pipeline.errors import DataLossError, InvalidArgumentError

from . import csv_syntax, fs, remote
from .reader import FileReaderNode, FileRecordsIterator, filenames_node

_ARROW_TYPES = {np.dtype(np.int32): pa.int32(), np.dtype(np.int64): pa.int64(), np.dtype(np.float32): pa.float32(),
                np.dtype(np.float64): pa.float64(), np.dtype(object): pa.binary()}


def _column_type(entry):
    """(numpy dtype, default or None) of one record_defaults entry."""
    if isinstance(entry, (type, np.dtype)) or (isinstance(entry, str) and entry in
                                                 ("string", "int32", "int64", "float32", "float64")):
        if entry in (str, bytes, object, "string"):
            return np.dtype(object), None
        dtype = np.dtype(entry)
        if dtype not in _ARROW_TYPES:
            raise TypeError(f"CsvDataset: unsupported column type {entry!r}")
        return dtype, None
    if isinstance(entry, np.ndarray):  # a numpy default keeps its dtype: [7] as int64 stays int64
        if entry.size != 1:
            raise ValueError(f"CsvDataset: a record_defaults entry must be a type or one value, got {entry!r}")
        entry = entry.reshape(-1)[0]
    elif isinstance(entry, (list, tuple)):
        if len(entry) != 1:
            raise ValueError(f"CsvDataset: a record_defaults entry must be a type or one value, got {entry!r}")
        entry = entry[0]
        if isinstance(entry, np.ndarray):
            return _column_type(entry)
    if isinstance(entry, (str, bytes, np.str_, np.bytes_)):
        return np.dtype(object), entry.encode("utf-8") if isinstance(entry, str) else bytes(entry)
    value = structure.to_array(entry, "record_defaults entry")
    dtype = np.asarray(value).dtype
    if dtype not in _ARROW_TYPES:
        raise TypeError(f"CsvDataset: unsupported default {entry!r} ({dtype})")
    return dtype, (value.item() if hasattr(value, "item") and dtype != object else value)


class CsvReader(FileReaderNode):
    kind = "CsvDataset"

    def __init__(self, filenames, record_defaults, compression_type="", buffer_size=None, header=False,
                 field_delim=",", use_quote_delim=True, na_value="", select_cols=None, exclude_cols=None,
                 storage_options=None):
        super().__init__((filenames,))
        self.remote_options = remote.RemoteOptions(storage_options, "CsvDataset")  # not a param
        if not record_defaults:
            raise ValueError("CsvDataset: record_defaults must name at least one column.")
        self.columns = [_column_type(e) for e in record_defaults]
        self.compression_type = fs.check_compression(compression_type, "CsvDataset")
        self.buffer_size = buffer_size
        self.header = bool(header)
        self.field_delim = field_delim
        self.use_quote_delim = bool(use_quote_delim)
        self.na_value = na_value
        if select_cols is not None and exclude_cols is not None:
            raise ValueError("CsvDataset: give select_cols or exclude_cols, not both.")
        if select_cols is not None:
            select_cols = [int(c) for c in select_cols]
            if select_cols != sorted(set(select_cols)):
                raise InvalidArgumentError("CsvDataset: select_cols must be strictly increasing.", "CsvDataset")
            if len(select_cols) != len(self.columns):
                raise ValueError(f"CsvDataset: {len(select_cols)} select_cols but {len(self.columns)} "
                                 "record_defaults.")
        self.select_cols = select_cols
        self.exclude_cols = None if exclude_cols is None else sorted(int(c) for c in exclude_cols)

    def params(self):
        return {"record_defaults": [(d.name, v) for d, v in self.columns], "header": self.header,
                "select_cols": self.select_cols, "compression_type": self.compression_type}

    def compute_spec(self):
        return tuple(structure.TensorSpec((), d) for d, _ in self.columns)


class CsvSource:
    """One file. pyarrow reads it a block at a time wherever its reading is TF's; a file (or the rest of one)
    where it may not be -- a bad field, a quote out of place, an empty line among several columns, a
    signed or payload NaN, a hex int -- is read row by row with TF's own syntax (``_records``)."""

    def __init__(self, node: CsvReader, data: bytes, filename: str, row: int):
        self._node, self._filename, self._row = node, filename, 0
        self._delim = node.field_delim.encode("utf-8")
        self._na = node.na_value.encode("utf-8") if isinstance(node.na_value, str) else bytes(node.na_value)
        buffer = pa.py_buffer(data)
        quoted = node.use_quote_delim and b'"' in data
        first_line = data[:min(i for i in (data.find(b"\n"), data.find(b"\r"), len(data)) if i >= 0)]
        # the header is TF's first record: a line, unless a quote in it may carry a newline
        header_in_quotes = node.header and quoted and b'"' in first_line
        # pyarrow names the columns f0, f1, ... and counts them itself (quoted delimiters included)
        self._read_options = pacsv.ReadOptions(
            autogenerate_column_names=True, skip_rows=1 if node.header and not header_in_quotes else 0,
            skip_rows_after_names=1 if header_in_quotes else 0,
            block_size=max(int(node.buffer_size or 0), 1 << 20))
        # an empty line is a record (of one empty field) in TF; quoted fields may hold newlines
        self._parse_options = pacsv.ParseOptions(delimiter=node.field_delim,
                                                 quote_char='"' if node.use_quote_delim else False,
                                                 newlines_in_values=quoted, ignore_empty_lines=False)
        self._pending = None
        self._data = data
        self._rows = None  # the row-by-row reader, once pyarrow's reading may not be TF's (see _row_mode)
        self._nan_checked = False
        if not data:  # TF: no records (with a header: an error); pyarrow refuses an empty file
            self._indices = list(node.select_cols or range(len(node.columns)))
            self._row_mode()
        else:
            self._open_arrow(buffer, quoted)
        while self._row < row and self._rows is None:  # restore: parse again, skip the rows delivered
            try:
                batch = self._next_batch()
            except InvalidArgumentError:  # a bad field in this block: read on row by row
                self._row_mode()
                break
            if batch is None:
                break
            skip = min(row - self._row, batch.num_rows)
            self._row += skip
            if skip < batch.num_rows:
                self._pending = batch.slice(skip)
        if self._rows is not None and row > self._row:
            self._row_mode(row)

    def _open_arrow(self, buffer, quoted: bool):
        node = self._node
        self._indices = self._column_indices(buffer)
        types = {f"f{i}": _ARROW_TYPES[d] for i, (d, _) in zip(self._indices, node.columns)}
        try:
            self._reader = pacsv.open_csv(
                buffer, read_options=self._read_options, parse_options=self._parse_options,
                # TF: an empty field, quoted or not, is missing like na_value
                convert_options=pacsv.ConvertOptions(column_types=types, include_columns=list(types),
                                                     null_values=sorted({node.na_value, ""}),
                                                     strings_can_be_null=True, quoted_strings_can_be_null=True))
        except (KeyError, pa.ArrowInvalid):  # a bad field, or a selected column the first row lacks:
            self._row_mode()  # find its row (the rows before it come first)
            return
        if quoted and not csv_syntax.quotes_are_plain(self._data, self._delim):
            self._row_mode()  # pyarrow reads a"b and "x"y as fields; TF refuses them, at their row
        elif any(d.kind == "i" for d, _ in node.columns) and csv_syntax.has_hex_field(self._data, self._delim):
            self._row_mode()  # pyarrow reads 0x10 as 16
        elif node.select_cols is None and node.exclude_cols is None and self._width_differs():
            self._row_mode()  # rows wider or narrower than record_defaults: an error at the first such row

    def _width(self, buffer=None) -> int:
        """The first block's width (pa.ArrowInvalid where pyarrow cannot read it)."""
        buffer = pa.py_buffer(self._data) if buffer is None else buffer
        return len(pacsv.open_csv(buffer, read_options=self._read_options, parse_options=self._parse_options).schema)

    def _width_differs(self) -> bool:
        try:
            return self._width() != len(self._node.columns)
        except pa.ArrowInvalid:
            return False  # let the reader report it, with its row

    # ------------------------------------------------------------------ row by row (TF's syntax)
    def _row_mode(self, row=None):
        """Read the rest of the file one record at a time, from record ``row`` (default: ``self._row``),
        with TF's syntax: pyarrow reports a bad field for a whole block, TF for its row -- with the rows
        before it delivered and, under ``ignore_errors``, only that row skipped. Only files pyarrow may read
        otherwise than TF take this (slower) path."""
        row = self._row if row is None else row
        self._rows = self._converted(row)
        self._row = row
        self._pending = None

    def _converted(self, skip: int):
        """(row tuple, None) or (None, error) per record after the first ``skip`` records; a bad header
        first, as (None, error) with no row of its own (``skip`` 0 only)."""
        node = self._node
        records = csv_syntax.records(self._data, self._delim, node.use_quote_delim)
        if node.header:
            header = next(records, None)
            if header is None or any(error for _, error in header):
                if skip == 0:  # TF: the header's error, then the records after it
                    yield None, self._error("Can't read header of file", 0), False
        for _ in range(skip):
            if next(records, None) is None:
                return
        for fields in records:
            try:
                yield self._convert_row(fields, self._row), None, True
            except InvalidArgumentError as error:
                yield None, error, True

    @property
    def can_continue(self) -> bool:
        return self._rows is not None  # after a bad row, the next row is read

    def _convert_row(self, fields, row: int) -> tuple:
        """One record as TF's ReadRecord makes it: the fields in order, the first error wins."""
        node = self._node
        ncols = len(node.columns)
        select, exclude = node.select_cols, node.exclude_cols
        out, selected, excluded = [], 0, 0
        for index, (raw, error) in enumerate(fields):
            explicit_exclude = exclude is not None and excluded < len(exclude) and exclude[excluded] == index
            if select is None and exclude is None:
                include = True
            elif select is not None:
                include = selected < len(select) and select[selected] == index
            else:
                include = not explicit_exclude
            excluded += explicit_exclude
            if error is not None:
                raise self._error(f"column {index}: {error}", row)
            if not include:
                continue
            selected += 1
            j = len(out)
            if j >= ncols:
                raise self._error(f"Expect {ncols} fields but have more in record", row)
            dtype, default = node.columns[j]
            if raw == b"" or raw == self._na:
                if default is None:
                    raise self._error(f"Field {j} (column {index}) is required but missing in record", row)
                out.append(np.asarray(default, dtype=dtype)[()] if dtype != np.dtype(object) else default)
                continue
            out.append(self._parse_field(raw, dtype, j, index, row))
        if len(out) != ncols:
            raise self._error(f"Expect {ncols} fields but have {len(out)} in record", row)
        return tuple(out)

    def _parse_field(self, raw: bytes, dtype, j: int, index: int, row: int):
        if dtype == np.dtype(object):
            return raw
        value = csv_syntax.parse_int(raw, dtype) if dtype.kind == "i" else csv_syntax.parse_float(raw, dtype)
        if value is None:
            shown = raw.decode("utf-8", "backslashreplace")
            raise self._error(f"Field {j} (column {index}) in record is not a valid {dtype.name}: {shown!r}", row)
        return value

    def _read_rows(self):
        out, start = [], self._row
        for value, error, is_row in self._rows:
            if error is not None:
                self._row += is_row  # the next read goes on after the bad row
                return out, np.arange(start, start + len(out), dtype=np.int64), error
            out.append(value)
            self._row += 1
            if len(out) >= 1024:
                break
        return out, np.arange(start, start + len(out), dtype=np.int64), None

    def _column_indices(self, buffer):
        node = self._node
        if node.select_cols is not None:
            return node.select_cols
        if node.exclude_cols is None:
            return list(range(len(node.columns)))
        try:  # the file's width, from the first block only
            width = self._width(buffer)
        except pa.ArrowInvalid as e:
            raise self._error(str(e)) from None
        cols = [i for i in range(width) if i not in node.exclude_cols]
        if len(cols) != len(node.columns):
            raise self._error(f"{width} columns less exclude_cols {node.exclude_cols} leave {len(cols)}, but "
                              f"record_defaults has {len(node.columns)}")
        return cols

    def _error(self, why: str, row=None):
        where = f" row {row}" if row is not None else ""
        return fs.with_location(InvalidArgumentError(f"{self._filename}{where}: {why}", "CsvDataset"),
                                self._filename, row)

    def _next_batch(self):
        try:
            return self._reader.read_next_batch()
        except StopIteration:
            return None
        except pa.ArrowInvalid as e:
            raise self._error(str(e), self._row) from None

    @property
    def offset(self):
        return self._row

    damage = None  # a DataLossError of the file's compressed stream: raised after the rows before it

    def read_block(self):
        rows, offsets, error = self._read_block()
        if not rows and error is None and self.damage is not None:
            error, self.damage = self.damage, None
        return rows, offsets, error

    def _read_block(self):
        if self._rows is not None:
            return self._read_rows()
        batch, self._pending = self._pending, None
        if batch is None:
            try:
                batch = self._next_batch()
            except InvalidArgumentError:
                self._row_mode()  # a bad field in this block: find its row, deliver the rows before it
                return self._read_rows()
        if batch is None or batch.num_rows == 0:
            return [], np.empty(0, dtype=np.int64), None
        node = self._node
        if self._needs_rows(batch):  # this block as pyarrow read it may not be TF's: from its first row on
            self._row_mode()
            return self._read_rows()
        columns = []
        for j, (index, (dtype, default)) in enumerate(zip(self._indices, node.columns)):
            col = batch.column(f"f{index}")
            if col.null_count:
                col = pc.fill_null(col, pa.scalar(default, _ARROW_TYPES[dtype]))
            columns.append(col.to_numpy(zero_copy_only=False).astype(dtype, copy=False))
        rows = list(zip(*columns))
        offsets = np.arange(self._row, self._row + len(rows), dtype=np.int64)
        self._row += len(rows)
        return rows, offsets, None

    def _needs_rows(self, batch) -> bool:
        """Whether a block needs TF's row-by-row reading: a missing required field (its error, at its row),
        an empty line among several columns (pyarrow reads it as all fields empty, TF as a record of one),
        a NaN that may carry a sign or a payload (pyarrow drops them)."""
        node = self._node
        cols = [batch.column(f"f{index}") for index in self._indices]
        if any(col.null_count and default is None for col, (_, default) in zip(cols, node.columns)):
            return True
        several = len(cols) > 1 or node.select_cols is not None or node.exclude_cols is not None
        if several and all(col.null_count for col in cols):
            empty = pc.is_null(cols[0])
            for col in cols[1:]:
                empty = pc.and_(empty, pc.is_null(col))
            if pc.any(empty).as_py():
                return True
        if not self._nan_checked:
            for col, (dtype, _) in zip(cols, node.columns):
                if dtype.kind == "f" and pc.any(pc.is_nan(col)).as_py():
                    self._nan_checked = True  # once per file: a -nan or nan(...) anywhere?
                    data = self._data  # (the substring tests first: they are fast)
                    self._nan_plain = not (b"(" in data or b"-n" in data or b"-N" in data) or \
                        re.search(rb"-[nN][aA][nN]|[nN][aA][nN]\(", data) is None
                    break
        return self._nan_checked and not self._nan_plain

    def close(self):
        pass


@builds(CsvReader)
class CsvIterator(FileRecordsIterator):
    def open_file(self, name, offset):
        stream = fs.open_stream(name, self.node.compression_type, options=self.node.remote_options)
        damage = None
        try:
            parts = []
            while True:
                try:
                    chunk = stream.read(1 << 22)
                except DataLossError as e:  # a damaged or cut GZIP/ZLIB stream: the rows wholly before the
                    damage = e  # damage first, then its error (as the other readers; docs/formats.md)
                    break
                if not chunk:
                    break
                parts.append(chunk)
        finally:
            stream.close()
        data = b"".join(parts)
        if damage is not None:
            data = data[:max(data.rfind(b"\n"), data.rfind(b"\r")) + 1]  # a record cut by the damage is no record
        source = CsvSource(self.node, data, name, offset or 0)
        source.damage = damage
        return source


class CsvDataset(Dataset):
    """``tf.data.experimental.CsvDataset(filenames, record_defaults, compression_type=None, buffer_size=None,
    header=False, field_delim=",", use_quote_delim=True, na_value="", select_cols=None, exclude_cols=None)``;
    ``storage_options`` as for ``TFRecordDataset``."""

    __slots__ = ()

    def __init__(self, filenames, record_defaults, compression_type=None, buffer_size=None, header=False,
                 field_delim=",", use_quote_delim=True, na_value="", select_cols=None, exclude_cols=None,
                 name=None, *, storage_options=None):
        node = CsvReader(filenames_node(filenames, "CsvDataset"), record_defaults, compression_type, buffer_size,
                         header, field_delim, use_quote_delim, na_value, select_cols, exclude_cols, storage_options)
        if name is not None:
            node.name = str(name)
        super().__init__(node)
