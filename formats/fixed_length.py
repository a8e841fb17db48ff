"""``FixedLengthRecordDataset``: files cut into records of ``record_bytes`` bytes, after a header and before a
footer (CIFAR-10's binary files, raw sensor dumps).

Elements are ``bytes`` scalars of exactly ``record_bytes`` bytes. A body (file minus header and footer) that
is not a whole number of records raises ``InvalidArgumentError`` naming the file and the lengths, as
TensorFlow does; for uncompressed files before the first record (the size is known), for GZIP/ZLIB files
when the stream ends (a deflate stream's length is known only at its end). State: (file, offset of the
next record in the uncompressed stream), as for the other readers.
"""

from __future__ import annotations

import os

from jaxfeed.pipeline import errors
from jaxfeed.pipeline.dataset import Dataset
from jaxfeed.pipeline.engine.registry import builds
from jaxfeed.pipeline.nodes.common import check_int

from . import fs, remote
from .reader import FileReaderNode, FileRecordsIterator, check_parallel_reads, filenames_node, parallel_reads

# Records per read: large enough that per-block work is small against the copy, bounded so a block of huge
# records stays a few MiB.
_BLOCK_BYTES = 1 << 20


class FixedLengthRecordReader(FileReaderNode):
    kind = "FixedLengthRecordDataset"

    def __init__(self, filenames, record_bytes, header_bytes=0, footer_bytes=0, buffer_size=None,
                 compression_type="", storage_options=None):
        super().__init__((filenames,))
        self.remote_options = remote.RemoteOptions(storage_options, "FixedLengthRecordDataset")  # not a param
        self.record_bytes = record_bytes
        self.header_bytes = header_bytes
        self.footer_bytes = footer_bytes
        self.buffer_size = buffer_size
        self.compression_type = compression_type

    def params(self):
        return {"record_bytes": self.record_bytes, "header_bytes": self.header_bytes,
                "footer_bytes": self.footer_bytes, "compression_type": self.compression_type}


class FixedLengthSource:
    """Hands out whole records from ``stream``, holding back the last ``footer`` bytes of the body until the
    stream proves they are not the footer."""

    def __init__(self, stream, name: str, offset: int, node: FixedLengthRecordReader, file_size: int | None):
        self._stream = stream
        self._name = name
        self._record = node.record_bytes
        self._footer = node.footer_bytes
        self._header = node.header_bytes
        self._pending = b""  # read but not handed out: a partial record and the possible footer
        self._offset = offset  # stream offset of the first pending byte
        self._limit = None if file_size is None else file_size - self._footer
        self._block = max(node.buffer_size or _BLOCK_BYTES, self._record)
        self._done = False
        if file_size is not None:
            self._check_body(file_size - self._header - self._footer)

    @property
    def offset(self):
        return self._offset

    def _check_body(self, body: int, compressed: bool = False):
        """A body that is no whole number of records: InvalidArgumentError when the file's size says so at its
        open, DataLossError when the end of a compressed stream does (after its whole records), as TF."""
        if body < 0 or body % self._record:
            error = errors.DataLossError if compressed else errors.InvalidArgumentError
            raise fs.with_location(error(
                f"Excluding the header ({self._header} bytes) and footer ({self._footer} bytes), input file "
                f"\"{self._name}\" has body length {body} bytes, which is not an exact multiple of the record "
                f"length ({self._record} bytes).", "FixedLengthRecordDataset"), self._name, self._offset)

    def read_block(self):
        record = self._record
        while not self._done:
            want = self._block - self._block % record
            if self._limit is not None:  # size known: never read into the footer
                want = min(want, self._limit - self._offset - len(self._pending))
            chunk = self._stream.read(want) if want > 0 else b""
            if not chunk:
                self._done = True
                break
            self._pending += chunk
            usable = len(self._pending) - (self._footer if self._limit is None else 0)
            whole = (usable // record) * record if usable > 0 else 0
            if whole:
                return self._hand_out(whole)
        if self._limit is None:  # compressed: now the body's length is known
            self._check_body(self._offset - self._header + len(self._pending) - self._footer, compressed=True)
        whole = (len(self._pending) - (self._footer if self._limit is None else 0)) // record * record
        if whole > 0:
            return self._hand_out(whole)
        if self._limit is not None and self._pending:  # the file shrank while we read it
            raise fs.with_location(errors.DataLossError(
                f"{self._name}: truncated record at offset {self._offset}", "FixedLengthRecordDataset"),
                self._name, self._offset)
        return [], None, None

    def _hand_out(self, whole: int):
        data, record, start = self._pending, self._record, self._offset
        records = [data[i:i + record] for i in range(0, whole, record)]
        offsets = range(start, start + whole, record)
        self._pending = data[whole:]
        self._offset = start + whole
        return records, offsets, None

    def close(self):
        self._stream.close()


@builds(FixedLengthRecordReader)
class FixedLengthRecordIterator(FileRecordsIterator):
    def open_file(self, name, offset):
        node = self.node
        start = node.header_bytes if offset is None else offset
        stream = fs.open_stream(name, node.compression_type, start, node.remote_options)
        file_size = None
        if not node.compression_type:  # the body's length is known before the first record
            local = fs._local(name)
            file_size = os.path.getsize(local) if local is not None else getattr(stream, "size", None)
        else:  # a stream that ends inside the header stops short of ``start``: its body is negative, an error
            start = min(start, getattr(stream, "position", start))  # (was taken for an empty body: no error)
        return FixedLengthSource(stream, name, start, node, file_size)


class FixedLengthRecordDataset(Dataset):
    """``tf.data.FixedLengthRecordDataset(filenames, record_bytes, header_bytes=None, footer_bytes=None,
    buffer_size=None, compression_type=None, num_parallel_reads=None)``; ``storage_options`` (jaxfeed) as
    for ``TFRecordDataset``."""

    __slots__ = ()

    def __init__(self, filenames, record_bytes, header_bytes=None, footer_bytes=None, buffer_size=None,
                 compression_type=None, num_parallel_reads=None, name=None, *, storage_options=None):
        what = "FixedLengthRecordDataset"
        names = filenames_node(filenames, what)
        record_bytes = check_int(record_bytes, "record_bytes", what)
        header_bytes = 0 if header_bytes is None else check_int(header_bytes, "header_bytes", what)
        footer_bytes = 0 if footer_bytes is None else check_int(footer_bytes, "footer_bytes", what)
        if buffer_size is not None:
            buffer_size = check_int(buffer_size, "buffer_size", what)
        for arg, value, low in (("record_bytes", record_bytes, 1), ("header_bytes", header_bytes, 0),
                                ("footer_bytes", footer_bytes, 0), ("buffer_size", buffer_size or 0, 0)):
            if value < low:
                raise errors.InvalidArgumentError(f"{what}: `{arg}` must be >= {low}, got {value}.", what)
        reads = check_parallel_reads(num_parallel_reads, what)
        compression_type = fs.check_compression(compression_type, what)
        args = (record_bytes, header_bytes, footer_bytes, buffer_size, compression_type, storage_options)
        if reads is None:
            node = FixedLengthRecordReader(names, *args)
        else:
            node = parallel_reads(Dataset(names), lambda f: FixedLengthRecordDataset(
                f, record_bytes, header_bytes, footer_bytes, buffer_size, compression_type,
                storage_options=storage_options), reads)._node
        if name is not None:
            node.name = str(name)
        super().__init__(node)
