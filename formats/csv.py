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
"""

from __future__ import annotations

import csv

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from jaxfeed.pipeline import structure
from jaxfeed.pipeline.dataset import Dataset
from jaxfeed.pipeline.engine.registry import builds
from jaxfeed.pipeline.errors import InvalidArgumentError

from . import fs, remote
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
    def __init__(self, node: CsvReader, data: bytes, filename: str, row: int):
        self._node, self._filename, self._row = node, filename, 0
        buffer = pa.py_buffer(data)
        # pyarrow names the columns f0, f1, ... and counts them itself (quoted delimiters included)
        self._read_options = pacsv.ReadOptions(autogenerate_column_names=True, skip_rows=1 if node.header else 0,
                                               block_size=max(int(node.buffer_size or 0), 1 << 20))
        self._parse_options = pacsv.ParseOptions(delimiter=node.field_delim,
                                                 quote_char='"' if node.use_quote_delim else False)
        self._indices = self._column_indices(buffer)
        types = {f"f{i}": _ARROW_TYPES[d] for i, (d, _) in zip(self._indices, node.columns)}
        self._pending = None
        self._data = data
        self._rows = None  # the row-by-row reader, once a block failed to parse (see _row_mode)
        try:
            self._reader = pacsv.open_csv(
                buffer, read_options=self._read_options, parse_options=self._parse_options,
                convert_options=pacsv.ConvertOptions(column_types=types, include_columns=list(types),
                                                     null_values=[node.na_value], strings_can_be_null=True,
                                                     quoted_strings_can_be_null=False))
        except KeyError as e:  # ArrowKeyError: a selected column the file lacks
            raise self._error(str(e)) from None
        except pa.ArrowInvalid:  # a bad field in the first block: find its row (the rows before it come first)
            self._row_mode()
        if self._rows is None and node.select_cols is None and node.exclude_cols is None and \
                self._width() != len(node.columns):
            self._row_mode()  # rows wider or narrower than record_defaults: an error at the first such row
        while self._row < row and self._rows is None:  # restore: parse again, skip the rows delivered
            batch = self._next_batch()
            if batch is None:
                break
            skip = min(row - self._row, batch.num_rows)
            self._row += skip
            if skip < batch.num_rows:
                self._pending = batch.slice(skip)
        if self._rows is not None:
            for _ in range(row - self._row):
                if next(self._rows, None) is None:
                    break
                self._row += 1

    def _width(self) -> int:
        try:  # the first block's width
            return len(pacsv.open_csv(pa.py_buffer(self._data), read_options=self._read_options,
                                      parse_options=self._parse_options).schema)
        except pa.ArrowInvalid:
            return len(self._node.columns)  # let the reader report it, with its row

    # ------------------------------------------------------------------ row by row (the error path)
    def _row_mode(self):
        """Parse the rest of the file one row at a time, from row ``self._row``: pyarrow reports a bad
        field for a whole block, TF for its row -- with the rows before it delivered and, under
        ``ignore_errors``, only that row skipped. Only files with a bad row take this (slower) path."""
        node = self._node
        text = self._data.decode("utf-8", "surrogateescape").splitlines()
        reader = csv.reader(text, delimiter=node.field_delim,
                            quoting=csv.QUOTE_MINIMAL if node.use_quote_delim else csv.QUOTE_NONE)
        rows = (r for r in reader if r)  # blank lines are skipped, as pyarrow skips them
        if node.header:
            next(rows, None)
        for _ in range(self._row):
            next(rows, None)
        self._rows = rows
        self._pending = None

    @property
    def can_continue(self) -> bool:
        return self._rows is not None  # after a bad row, the next row is read

    def _convert_row(self, fields, row: int) -> tuple:
        node = self._node
        width = len(fields)
        if node.select_cols is None and node.exclude_cols is None and width != len(node.columns):
            more = "more" if width > len(node.columns) else "fewer"
            raise self._error(f"Expect {len(node.columns)} fields but have {more} in record", row)
        out = []
        for j, (index, (dtype, default)) in enumerate(zip(self._indices, node.columns)):
            if index >= width:
                raise self._error(f"Expect at least {index + 1} fields but have {width} in record", row)
            field = fields[index]
            if field == node.na_value or (field == "" and dtype != np.dtype(object)):
                if default is None:
                    raise self._error(f"Field {j} (column {index}) is required but missing", row)
                out.append(np.asarray(default, dtype=dtype)[()] if dtype != np.dtype(object) else default)
                continue
            out.append(self._parse_field(field, dtype, j, index, row))
        return tuple(out)

    def _parse_field(self, field: str, dtype, j: int, index: int, row: int):
        if dtype == np.dtype(object):
            return field.encode("utf-8", "surrogateescape")
        try:
            if dtype.kind == "i":
                value = int(field.strip(), 10)
                info = np.iinfo(dtype)
                if not info.min <= value <= info.max:
                    raise ValueError
                return dtype.type(value)
            return dtype.type(float(field))
        except ValueError:
            raise self._error(f"Field {j} (column {index}) in record is not a valid {dtype.name}: {field!r}",
                              row) from None

    def _read_rows(self):
        out, start = [], self._row
        for fields in self._rows:
            try:
                out.append(self._convert_row(fields, self._row))
            except InvalidArgumentError as error:
                self._row += 1  # the next read goes on after the bad row
                return out, np.arange(start, start + len(out), dtype=np.int64), error
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
            width = len(pacsv.open_csv(buffer, read_options=self._read_options,
                                       parse_options=self._parse_options).schema)
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

    def read_block(self):
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
        columns = []
        for j, (index, (dtype, default)) in enumerate(zip(self._indices, self._node.columns)):
            col = batch.column(f"f{index}")
            if col.null_count:
                if default is None:  # the rows before the missing field first, then its error
                    self._row_mode()
                    return self._read_rows()
                col = pc.fill_null(col, pa.scalar(default, _ARROW_TYPES[dtype]))
            columns.append(col.to_numpy(zero_copy_only=False).astype(dtype, copy=False))
        rows = list(zip(*columns))
        offsets = np.arange(self._row, self._row + len(rows), dtype=np.int64)
        self._row += len(rows)
        return rows, offsets, None

    def close(self):
        pass


@builds(CsvReader)
class CsvIterator(FileRecordsIterator):
    def open_file(self, name, offset):
        stream = fs.open_stream(name, self.node.compression_type, options=self.node.remote_options)
        try:
            parts = []
            while True:
                chunk = stream.read(1 << 22)
                if not chunk:
                    break
                parts.append(chunk)
        finally:
            stream.close()
        return CsvSource(self.node, b"".join(parts), name, offset or 0)


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
