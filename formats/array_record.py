"""``ArrayRecordDataset``: records of ArrayRecord files (Grain's and TFDS's format), as a random-access source.

With a file list known when the dataset is built, the node has random access: the files' records form
one index space (file after file), so ``shuffle``, ``shard``, ``skip``/``take`` and ``batch`` work on
indices and a batch is one grouped read per file -- the way Grain reads these files. With a file list
known only at run time (a Dataset of names) it reads the files front to back instead; state is then
(file, record index). Elements are ``bytes`` scalars, as ``TFRecordDataset``'s.

Needs the optional ``array-record`` package (``pip install jaxfeed[array_record]``); its C++ reader opens
local paths only, so URLs other than plain paths and ``file://`` are refused with a clear error.
"""

from __future__ import annotations

import threading

import numpy as np

from jaxfeed.pipeline.dataset import Dataset
from jaxfeed.pipeline.engine.registry import builds
from jaxfeed.pipeline.errors import InvalidArgumentError, NotFoundError, UnimplementedError
from jaxfeed.pipeline.iterators.random_access import RandomAccessIterator

from . import fs
from .reader import FileReaderNode, FileRecordsIterator, filenames_node

OPEN_FILES = 16  # readers kept open by one node (index lookups touch many files when shuffled)
BLOCK = 256  # records per sequential read


def _module():
    try:
        from array_record.python import array_record_module
    except ImportError:
        raise ImportError("ArrayRecord support needs the `array-record` package: pip install jaxfeed[array_record]"
                          ) from None
    return array_record_module


def _local_path(url: str, what: str) -> str:
    local = fs._local(url)
    if local is None:
        raise UnimplementedError(f"{what}: {url!r}: the array_record reader opens local files only.", what)
    return local


def _open_reader(url: str, random_access: bool):
    path = _local_path(url, "ArrayRecordDataset")
    options = "readahead_buffer_size:0" if random_access else ""
    import os

    if not os.path.exists(path):
        raise fs.with_location(NotFoundError(f"{url}; No such file or directory", "ArrayRecordDataset"), url)
    try:
        return _module().ArrayRecordReader(path, options)
    except (RuntimeError, ValueError, OSError) as e:
        raise fs.with_location(InvalidArgumentError(f"{url}: not a readable ArrayRecord file: {e}",
                                                    "ArrayRecordDataset"), url) from None


class ArrayRecordReaderNode(FileReaderNode):
    kind = "ArrayRecordDataset"

    def __init__(self, filenames):
        super().__init__((filenames,))
        self._reset()

    def _reset(self):
        self._index = None  # (names, starts): record i of the whole list is in file searchsorted(starts, i)
        self._readers: dict = {}
        self._lock = threading.Lock()  # gather runs on batch worker threads too

    def __getstate__(self):  # readers and the lock stay behind (process executors pickle graphs)
        state = self.__dict__.copy()
        for key in ("_index", "_readers", "_lock"):
            state.pop(key, None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._reset()

    def with_inputs(self, inputs):
        new = super().with_inputs(inputs)
        new._reset()
        return new

    def replace(self, **attributes):
        new = super().replace(**attributes)
        new._reset()
        return new

    # ------------------------------------------------------------------ random access
    def random_access(self):
        return self.inputs[0].random_access()

    def _reader(self, name):
        r = self._readers.pop(name, None)
        if r is None:
            r = _open_reader(name, random_access=True)
            while len(self._readers) >= OPEN_FILES:
                self._readers.pop(next(iter(self._readers))).close()
        self._readers[name] = r
        return r

    def _files_index(self):
        with self._lock:
            if self._index is None:
                names = self.files()
                starts = np.zeros(len(names) + 1, dtype=np.int64)
                np.cumsum([self._reader(n).num_records() for n in names], out=starts[1:])
                self._index = (names, starts)
            return self._index

    def length(self):
        return int(self._files_index()[1][-1])

    def cardinality(self):
        if self.random_access():
            return self.length()
        return super().cardinality()

    def gather(self, indices):
        indices = np.asarray(indices, dtype=np.int64)
        names, starts = self._files_index()
        out = np.empty(len(indices), dtype=object)
        if not len(indices):
            return out
        if indices.min() < 0 or indices.max() >= starts[-1]:
            raise InvalidArgumentError(f"ArrayRecordDataset: record index out of range [0, {int(starts[-1])}).",
                                       "ArrayRecordDataset")
        file_of = np.searchsorted(starts, indices, side="right") - 1
        with self._lock:
            for k in np.unique(file_of).tolist():
                where = np.flatnonzero(file_of == k)
                records = self._reader(names[k]).read((indices[where] - starts[k]).tolist())
                out[where] = records
        return out

    def element_at(self, index):
        return self.gather(np.array([index], dtype=np.int64))[0]


class _RecordSource:
    """Reads one file front to back in blocks; ``offset`` is the next record's index."""

    def __init__(self, name: str, start: int):
        self._reader = _open_reader(name, random_access=False)
        self._n = self._reader.num_records()
        self._next = start

    @property
    def offset(self):
        return self._next

    def read_block(self):
        start, stop = self._next, min(self._next + BLOCK, self._n)
        if start >= stop:
            return [], None, None
        records = self._reader.read(list(range(start, stop)))
        self._next = stop
        return records, range(start, stop), None

    def close(self):
        self._reader.close()


class ArrayRecordStreamIterator(FileRecordsIterator):
    def open_file(self, name, offset):
        return _RecordSource(name, offset or 0)


@builds(ArrayRecordReaderNode)
def array_record_iterator(node, ctx):
    """In index space when the files can be read by index (a later ``batch`` gathers once)."""
    if node.random_access():
        return RandomAccessIterator(node, ctx)
    return ArrayRecordStreamIterator(node, ctx)


class ArrayRecordDataset(Dataset):
    """``ArrayRecordDataset(filenames)``: ``filenames`` a path, a list of them, or a Dataset of names."""

    __slots__ = ()

    def __init__(self, filenames, name=None):
        _module()  # a clear ImportError now, not when iterating
        node = ArrayRecordReaderNode(filenames_node(filenames, "ArrayRecordDataset"))
        if name is not None:
            node.name = str(name)
        super().__init__(node)


class ArrayRecordWriter:
    """Writes records to one ArrayRecord file: ``write(record)``, ``close()``; a context manager.
    ``options`` is array_record's options string; ``group_size:1`` (the default) makes every record its own
    chunk, which is what random access wants (Grain's advice)."""

    def __init__(self, path, options: str = "group_size:1"):
        self.path = _local_path(fs.as_path(path), "ArrayRecordWriter")
        self._writer = _module().ArrayRecordWriter(self.path, options)

    def write(self, record) -> None:
        if self._writer is None:
            raise InvalidArgumentError(f"{self.path}: the writer is closed.", "ArrayRecordWriter")
        self._writer.write(record.encode("utf-8") if isinstance(record, str) else bytes(record))

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


__all__ = ["ArrayRecordDataset", "ArrayRecordWriter"]
