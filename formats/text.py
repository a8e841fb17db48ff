"""``TextLineDataset``: the lines of text files as ``bytes`` scalars (docs/tf-behaviour.md#text-line).

Lines split on ``\\n``; every ``\\r`` byte is dropped (not only one before ``\\n``); blank lines are kept; a
final newline adds no empty line, nor do ``\\r`` bytes after it: TensorFlow keeps a last line only if it
holds a byte other than ``\\r`` (``b"a\\n\\r"`` is one line, ``b"\\r"`` none). Each block is split with one
``bytes.split`` and its line offsets come from one cumulative sum. State: (file, byte offset of the next
line in the uncompressed stream).
"""

from __future__ import annotations

import numpy as np

from jaxfeed.pipeline.dataset import Dataset
from jaxfeed.pipeline.engine.registry import builds

from . import fs, remote
from .reader import FileReaderNode, FileRecordsIterator, check_parallel_reads, filenames_node, parallel_reads

BLOCK_SIZE = 1 << 20


class TextLineReader(FileReaderNode):
    kind = "TextLineDataset"

    def __init__(self, filenames, compression_type="", buffer_size=None, storage_options=None):
        super().__init__((filenames,))
        self.remote_options = remote.RemoteOptions(storage_options, "TextLineDataset")  # not a param
        self.compression_type = fs.check_compression(compression_type, "TextLineDataset")
        self.buffer_size = None if buffer_size is None else int(buffer_size)

    def params(self):
        return {"compression_type": self.compression_type}


class LineSource:
    def __init__(self, stream, offset: int, block_size: int):
        self._stream = stream
        self._block_size = block_size
        self._tail = b""  # an unfinished line
        self._tail_start = offset  # stream offset of the tail

    @property
    def offset(self):
        return self._tail_start

    def read_block(self):
        while True:
            chunk = self._stream.read(max(self._block_size, len(self._tail)))  # long lines: linear, not quadratic
            if not chunk:
                line, start = self._tail.replace(b"\r", b""), self._tail_start
                self._tail_start += len(self._tail)
                self._tail = b""
                if not line:  # nothing, or only ``\r`` bytes, after the last ``\n``: no line (as TF)
                    return [], _EMPTY, None
                return [line], np.array([start], dtype=np.int64), None
            data = self._tail + chunk if self._tail else chunk
            cut = data.rfind(b"\n")
            if cut < 0:
                self._tail = data
                continue
            body = data[:cut]
            lines = body.split(b"\n")
            sizes = np.fromiter(map(len, lines), dtype=np.int64, count=len(lines)) + 1
            offsets = self._tail_start + np.concatenate([[0], np.cumsum(sizes[:-1])]).astype(np.int64)
            if b"\r" in body:
                lines = [line.replace(b"\r", b"") for line in lines]
            self._tail = data[cut + 1:]
            self._tail_start += cut + 1
            return lines, offsets, None

    def close(self):
        self._stream.close()


_EMPTY = np.empty(0, dtype=np.int64)


@builds(TextLineReader)
class TextLineIterator(FileRecordsIterator):
    def open_file(self, name, offset):
        offset = offset or 0
        stream = fs.open_stream(name, self.node.compression_type, offset, self.node.remote_options)
        return LineSource(stream, offset, max(self.node.buffer_size or BLOCK_SIZE, 1))


class TextLineDataset(Dataset):
    """``tf.data.TextLineDataset(filenames, compression_type=None, buffer_size=None, num_parallel_reads=None)``;
    arguments as for ``TFRecordDataset`` (``storage_options`` too)."""

    __slots__ = ()

    def __init__(self, filenames, compression_type=None, buffer_size=None, num_parallel_reads=None, name=None, *,
                 storage_options=None):
        names = filenames_node(filenames, "TextLineDataset")
        reads = check_parallel_reads(num_parallel_reads, "TextLineDataset")
        compression_type = fs.check_compression(compression_type, "TextLineDataset")
        if reads is None:
            node = TextLineReader(names, compression_type, buffer_size, storage_options)
        else:
            def read_one(filename):
                return TextLineDataset(filename, compression_type, buffer_size, storage_options=storage_options)

            node = parallel_reads(Dataset(names), read_one, reads)._node
        if name is not None:
            node.name = str(name)
        super().__init__(node)
