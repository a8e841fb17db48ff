"""Parquet, Arrow IPC and Feather datasets on pyarrow, random-access by row.

The unit of reading is a *row group* (Parquet) or a *record batch* (IPC file / Feather v2). When the file
list is known at construction, the node knows every unit's row count from the file metadata and maps a
global row index to (file, unit, row): shuffle / shard / skip / take move indices and ``batch`` gathers a
whole batch in one call. A unit is read once and cached (the last ``CACHE_UNITS``): its fixed-width columns
as numpy (views of the Arrow buffers where possible), so a contiguous batch is a slice of those arrays,
never a re-stacking of rows; its string and binary columns stay Arrow and become ``bytes`` objects only for
the rows a batch takes (a unit's worth of Python objects would be ~2.5x the Arrow bytes, held as long as the
unit is cached). Row groups are decoded on the calling thread (Arrow's thread pool does not pay off for row
groups of a few MiB and keeps per-thread allocator pools), and at most ``OPEN_FILES`` files stay open: a
Parquet reader keeps about one row group's decode buffers until its file is closed.

Elements are dicts ``{column: scalar}``; with ``batch_size=n`` the dataset streams record batches instead
(dicts of arrays of up to n rows). Strings and binaries become ``bytes`` in object arrays.

Sharding by row group: ``units()`` lists (file, unit, rows); ``shard_units(num_shards, index)`` keeps
every num_shards-th unit from ``index`` (whole row groups per worker). A file list that is only known at
run time (a Dataset of names), and ``batch_size`` record batches, stream files in order, at most
``STREAM_ROWS`` rows (or whole batches) per block, with (file, unit, row) state.
"""

from __future__ import annotations

import collections
import threading

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from jaxfeed.pipeline import errors, structure
from jaxfeed.pipeline.dataset import Dataset
from jaxfeed.pipeline.engine.registry import builds
from jaxfeed.pipeline.iterators.random_access import RandomAccessIterator
from jaxfeed.pipeline.nodes.base import UNKNOWN

from . import fs, remote
from .reader import FileReaderNode, FileRecordsIterator, filenames_node

CACHE_UNITS = 2  # decoded units kept by a random-access node (batch gathers on worker threads may straddle two)
OPEN_FILES = 2  # open files per node (consecutive units come from one file, a batch may straddle two)
STREAM_ROWS = 1024  # rows a streaming reader (a run-time file list, or batch_size) hands on per block


def _is_bytes_like(t) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or \
        pa.types.is_large_binary(t)


def _as_binary(col):
    """A string column as binary (a zero-copy cast: its numpy form holds ``bytes``); others unchanged."""
    t = col.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return col.cast(pa.binary() if pa.types.is_string(t) else pa.large_binary())
    return col


def gather_columns(table) -> dict:
    """A unit's columns as random-access gathers keep them: numpy arrays, except string and binary columns,
    which stay one (binary) Arrow array each until ``rows_of`` / ``take_of`` converts the rows asked for."""
    out = {}
    for name, col in zip(table.schema.names, table.columns):
        if _is_bytes_like(col.type):
            col = _as_binary(col)
            out[name] = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        else:
            out[name] = col.to_numpy(zero_copy_only=False)
    return out


def rows_of(col, lo: int, hi: int):
    """Rows ``lo:hi`` of a ``gather_columns`` column: a view of a numpy column, a new object array of bytes
    from an Arrow one."""
    if isinstance(col, np.ndarray):
        return col[lo:hi]
    return col.slice(lo, hi - lo).to_numpy(zero_copy_only=False)


def take_of(col, rows):
    """The given rows (an int array) of a ``gather_columns`` column, as a new numpy array."""
    if isinstance(col, np.ndarray):
        return col[rows]
    return col.take(pa.array(rows)).to_numpy(zero_copy_only=False)


def _is_run(indices, first: int) -> bool:
    """Whether the int64 ``indices`` are ``first, first + 1, ...``: one byte compare with an arange, about 30x
    cheaper per batch than ``np.diff`` + ``all`` (which cost as much as slicing the batch's columns)."""
    return indices.tobytes() == np.arange(first, first + len(indices), dtype=np.int64).tobytes()


def _slice_columns(columns, a: int, b: int) -> dict:
    """Rows ``a:b`` of a unit's ``(name, column, is numpy)`` columns: views of cached numpy columns are
    copied (a batch never aliases the cache), Arrow ones become new object arrays of ``bytes``."""
    return {n: c[a:b].copy() if is_numpy else c.slice(a, b - a).to_numpy(zero_copy_only=False)
            for n, c, is_numpy in columns}


def _numpy_dtype(t) -> np.dtype:
    if _is_bytes_like(t):
        return np.dtype(object)
    try:
        return np.dtype(t.to_pandas_dtype())
    except (NotImplementedError, TypeError):
        return np.dtype(object)


class _File:
    """One open file: its units and how to read one."""

    def __init__(self, url: str, kind: str, columns, options=None):
        self.url, self.kind, self.columns = url, kind, columns
        self._raw = fs.open_binary(url, options=options)
        try:
            if kind == "parquet":
                self._pq = pq.ParquetFile(self._raw)
                meta = self._pq.metadata
                self.rows = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
                self.schema = self._pq.schema_arrow
            else:
                try:
                    self._ipc = ipc.open_file(self._raw)
                    self.rows = [self._ipc.get_batch(i).num_rows for i in range(self._ipc.num_record_batches)]
                    self.schema = self._ipc.schema
                    self._batches = None
                except pa.ArrowInvalid:  # the IPC stream format: no footer, read it all
                    self._raw.seek(0)
                    reader = ipc.open_stream(self._raw)
                    self._batches = list(reader)
                    self.schema = reader.schema
                    self.rows = [b.num_rows for b in self._batches]
        except errors.OpError:  # a remote read that failed (timeout, 503, short answer): as it is
            raise
        except (pa.ArrowInvalid, OSError) as e:
            from jaxfeed.pipeline.errors import DataLossError

            raise fs.with_location(DataLossError(f"{url}: not a readable {kind} file ({e})", kind), url, 0) from None

    def read_table(self, unit: int):
        """Unit ``unit`` as an Arrow Table / RecordBatch (decoded on this thread)."""
        if self.kind == "parquet":
            return self._pq.read_row_group(unit, columns=self.columns, use_threads=False)
        batch = self._batches[unit] if self._batches is not None else self._ipc.get_batch(unit)
        return batch.select(self.columns) if self.columns else batch

    def close(self):
        self._raw.close()


class ArrowReader(FileReaderNode):
    """Rows (or record batches) of Parquet / Arrow IPC / Feather files."""

    def __init__(self, filenames, kind: str, columns=None, batch_size=None, unit_shard=None, storage_options=None):
        super().__init__((filenames,))
        self.remote_options = remote.RemoteOptions(storage_options, kind)  # not a param
        self.format = kind
        self.kind = "ParquetDataset" if kind == "parquet" else "ArrowDataset"
        self.columns = None if columns is None else [str(c) for c in columns]
        self.batch_size = None if batch_size is None else int(batch_size)
        self.unit_shard = unit_shard
        self._reset_caches()

    def _reset_caches(self):
        self._index = None
        self._cache: collections.OrderedDict = collections.OrderedDict()
        self._open: dict = {}
        # the unit the last run of rows came from, (first row, end row, its columns as (name, column, is
        # numpy), unit): consecutive batches of a row group are sliced from it without a search or a lock. It is
        # one of the cached units (dropped when the cache drops that unit), so it holds no extra memory.
        self._recent = None
        # gather runs on batch's worker threads too: one reader at a time per node (a file handle seeks)
        self._lock = threading.RLock()

    def __getstate__(self):  # open files, caches and the lock stay behind (process executors pickle graphs)
        state = self.__dict__.copy()
        for key in ("_index", "_cache", "_open", "_recent", "_lock"):
            state.pop(key, None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._reset_caches()

    def params(self):
        return {"columns": self.columns, "batch_size": self.batch_size, "unit_shard": self.unit_shard}

    # ------------------------------------------------------------------ metadata
    def open(self, url: str) -> _File:
        """The open file (a few stay open: consecutive units usually come from the same file)."""
        with self._lock:
            f = self._open.pop(url, None)
            if f is None:
                f = _File(url, self.format, self.columns, self.remote_options)
                while len(self._open) >= OPEN_FILES:
                    self._open.pop(next(iter(self._open))).close()
            self._open[url] = f  # most recently used last
            return f

    def units(self) -> list:
        """(file, unit, rows) for every row group / record batch this dataset reads, in order."""
        names = self.files()
        if names is None:
            raise TypeError(f"{self.kind}: the file list is only known at run time")
        units = [(n, u, r) for n in names for u, r in enumerate(self._unit_rows(n))]
        if self.unit_shard is not None:
            num, index = self.unit_shard
            units = units[index::num]
        return units

    def _unit_rows(self, url: str) -> list:
        """The row counts of a file's units, for the index. The first ``OPEN_FILES`` files it opens stay open
        and later ones are closed at once: reads begin with the first files, which are then not opened a
        second time (keeping the last ones open, as ``open`` would, made every file open twice an epoch)."""
        with self._lock:
            f = self._open.get(url)
            if f is None:
                f = _File(url, self.format, self.columns, self.remote_options)
                if len(self._open) < OPEN_FILES:
                    self._open[url] = f
                else:
                    f.close()
            return f.rows

    def _units_index(self):
        with self._lock:
            return self._build_index()

    def _build_index(self):
        if self._index is None:
            units = self.units()
            starts = np.zeros(len(units) + 1, dtype=np.int64)
            np.cumsum([r for _, _, r in units], out=starts[1:])
            self._index = (units, starts)
        return self._index

    def with_inputs(self, inputs):
        new = super().with_inputs(inputs)
        new._reset_caches()
        return new

    def replace(self, **attributes):
        new = super().replace(**attributes)
        new._reset_caches()
        return new

    def compute_spec(self):
        names = self.files()
        if names is None:  # a run-time file list: look at its first file
            from jaxfeed.pipeline.nodes.common import sample_element

            try:
                names = [fs.as_path(sample_element(self.inputs[0]))]
            except StopIteration:
                names = []
        if not names:
            return {}
        schema = self.open(names[0]).schema
        fields = [schema.field(c) for c in (self.columns or schema.names)]
        shape = () if self.batch_size is None else (None,)
        return {f.name: structure.TensorSpec(shape, _numpy_dtype(f.type)) for f in fields}

    # ------------------------------------------------------------------ random access
    def random_access(self):
        return self.batch_size is None and self.inputs[0].random_access()

    def length(self):
        return int(self._units_index()[1][-1])

    def cardinality(self):
        if self.random_access():
            return self.length()
        if self.batch_size is not None and self.inputs[0].random_access():
            units = self.units()
            return int(sum(-(-r // self.batch_size) for _, _, r in units))
        return UNKNOWN

    def unit_columns(self, k: int) -> dict:
        """Unit k's columns as ``gather_columns`` keeps them (cached: consecutive batches come from the same
        row group)."""
        with self._lock:
            cols = self._cache.get(k)
            if cols is None:
                units = self._units_index()[0]
                name, unit, _ = units[k]
                cols = gather_columns(self.open(name).read_table(unit))
                self._cache[k] = cols
                while len(self._cache) > CACHE_UNITS:
                    dropped, _ = self._cache.popitem(last=False)
                    if self._recent is not None and self._recent[3] == dropped:
                        self._recent = None
            return cols

    def gather(self, indices):
        indices = np.asarray(indices, dtype=np.int64)
        n = len(indices)
        if n == 0:
            return {k: np.empty(0, dtype=s.dtype) for k, s in self.element_spec.items()}
        first_row = int(indices[0])
        if int(indices[-1]) - first_row + 1 == n and _is_run(indices, first_row):
            return self.gather_span(first_row, first_row + n)
        starts = self._units_index()[1]
        unit_of = np.searchsorted(starts, indices, side="right") - 1
        out = None
        for k in np.unique(unit_of).tolist():
            cols = self.unit_columns(k)
            where = np.flatnonzero(unit_of == k)
            rows = indices[where] - starts[k]
            if out is None:
                out = {n: np.empty(len(indices), dtype=c.dtype if isinstance(c, np.ndarray) else object)
                       for n, c in cols.items()}
            for n, c in cols.items():
                out[n][where] = take_of(c, rows)
        return out

    def gather_span(self, start: int, stop: int) -> dict:
        """Rows ``start:stop`` (a batch of the plain stream asks for them so, without an index array): sliced
        from the recent unit when they lie in it, else found by ``_gather_run``."""
        if start >= stop:
            return self.gather(np.empty(0, dtype=np.int64))
        recent = self._recent
        if recent is not None and recent[0] <= start and stop <= recent[1]:
            a = start - recent[0]
            return _slice_columns(recent[2], a, a + stop - start)
        return self._gather_run(start, stop)

    def _gather_run(self, lo: int, hi: int) -> dict:
        """Rows ``lo:hi`` (the common batch): slices of one or two units, no per-row index work -- the unit
        found from the first row alone, each column one slice (a batch costs ~ a hand loop's slicing). A run
        within one unit leaves that unit as ``_recent``, where the next batch finds it without a search."""
        starts = self._units_index()[1]
        k = int(np.searchsorted(starts, lo, side="right")) - 1
        parts = []
        while True:
            cols = self.unit_columns(k)
            base, end = int(starts[k]), int(starts[k + 1])
            a, b = lo - base, min(hi, end) - base
            if not parts and hi <= end:
                columns = tuple((n, c, isinstance(c, np.ndarray)) for n, c in cols.items())
                with self._lock:
                    if k in self._cache:  # still cached (a gather on another thread may have dropped it)
                        self._recent = (base, end, columns, k)
                return _slice_columns(columns, a, b)
            parts.append({n: rows_of(c, a, b) for n, c in cols.items()})
            if hi <= end:
                return {n: np.concatenate([p[n] for p in parts]) for n in parts[0]}
            lo, k = end, k + 1

    def element_at(self, index):
        batch = self.gather(np.array([index], dtype=np.int64))
        return {n: c[0] for n, c in batch.items()}


class _UnitSource:
    """Streams one file, at most ``STREAM_ROWS`` rows per block (whole batches in batch mode); offsets are
    (unit, row) pairs. The current unit is decoded once and kept as ``gather_columns`` while its rows are
    handed on, so only a block's rows exist as Python objects at a time."""

    def __init__(self, node: ArrowReader, name: str, offset):
        self._node = node
        self._file = _File(name, node.format, node.columns, node.remote_options)
        self._unit, self._row = offset if offset is not None else (0, 0)
        self._cols = None  # the current unit's columns (``gather_columns``), while rows of it remain

    @property
    def offset(self):
        return (self._unit, self._row)

    def read_block(self):
        f = self._file
        while self._unit < len(f.rows) and self._row >= f.rows[self._unit]:
            self._unit, self._row, self._cols = self._unit + 1, 0, None
        if self._unit >= len(f.rows):
            return [], [], None
        if self._cols is None:
            self._cols = gather_columns(f.read_table(self._unit))
        rows = f.rows[self._unit]
        size = self._node.batch_size
        step = STREAM_ROWS if size is None else size * max(1, STREAM_ROWS // size)  # batches stay whole
        lo, hi = self._row, min(rows, self._row + step)
        part = {n: rows_of(c, lo, hi) for n, c in self._cols.items()}
        if size is None:
            items = structure.unstack_rows(part, hi - lo)
            offsets = [(self._unit, r) for r in range(lo, hi)]
        else:
            items = [{n: c[b:b + size] for n, c in part.items()} for b in range(0, hi - lo, size)]
            offsets = [(self._unit, lo + b) for b in range(0, hi - lo, size)]
        self._row = hi
        return items, offsets, None

    def close(self):
        self._cols = None
        self._file.close()


class ArrowStreamIterator(FileRecordsIterator):
    def open_file(self, name, offset):
        return _UnitSource(self.node, name, None if offset is None else tuple(offset))


@builds(ArrowReader)
def arrow_iterator(node, ctx):
    """In index space when the files can be read by index (a later ``batch`` gathers once)."""
    if node.random_access():
        return RandomAccessIterator(node, ctx)
    return ArrowStreamIterator(node, ctx)


class _ArrowDatasetBase(Dataset):
    __slots__ = ()
    _format = ""

    def __init__(self, filenames, columns=None, batch_size=None, name=None, _node=None, *, storage_options=None):
        node = _node or ArrowReader(filenames_node(filenames, type(self).__name__), self._format, columns, batch_size,
                                    storage_options=storage_options)
        if name is not None:
            node.name = str(name)
        super().__init__(node)

    def units(self) -> list:
        """(file, row group or record batch, rows) for every unit read, in order (for sharding)."""
        return self._node.units()

    def shard_units(self, num_shards: int, index: int):
        """This dataset restricted to every ``num_shards``-th unit from ``index`` (whole row groups)."""
        if not 0 <= int(index) < int(num_shards):
            from jaxfeed.pipeline.errors import InvalidArgumentError

            raise InvalidArgumentError(f"shard_units: index {index} out of range for {num_shards} shards",
                                       "shard_units")
        return type(self)(None, _node=self._node.replace(unit_shard=(int(num_shards), int(index))))


class ParquetDataset(_ArrowDatasetBase):
    """``ParquetDataset(filenames, columns=None, batch_size=None)``: rows as ``{column: scalar}`` dicts
    (random-access when ``filenames`` is a str or list), or record batches of up to ``batch_size`` rows.
    ``storage_options`` as for ``TFRecordDataset``."""

    __slots__ = ()
    _format = "parquet"


class ArrowDataset(_ArrowDatasetBase):
    """Like ``ParquetDataset`` for Arrow IPC files, IPC streams and Feather (v2) files."""

    __slots__ = ()
    _format = "ipc"


FeatherDataset = ArrowDataset
