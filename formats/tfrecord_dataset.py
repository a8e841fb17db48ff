"""``TFRecordDataset``: the node that reads TFRecord files and its iterator (framing in ``tfrecord.py``).

Elements are the raw records as ``bytes`` scalars. State is (input state, current file, byte offset of the
next record in the uncompressed stream); restoring reopens the file and seeks there -- for GZIP/ZLIB files
by decompressing again from the start and skipping (a deflate stream has no random access).
"""

from __future__ import annotations

from jaxfeed.pipeline.dataset import Dataset
from jaxfeed.pipeline.engine.registry import builds

from . import fs, remote, tfrecord
from .reader import FileReaderNode, FileRecordsIterator, check_parallel_reads, filenames_node, parallel_reads


class TFRecordReader(FileReaderNode):
    kind = "TFRecordDataset"

    def __init__(self, filenames, compression_type="", buffer_size=None, verify_crc=True, storage_options=None):
        super().__init__((filenames,))
        # not a param: timeouts and headers (credentials) do not decide what is read
        self.remote_options = remote.RemoteOptions(storage_options, "TFRecordDataset")
        self.compression_type = fs.check_compression(compression_type, "TFRecordDataset")
        if buffer_size is not None and (isinstance(buffer_size, bool) or int(buffer_size) < 0):
            raise ValueError(f"TFRecordDataset: buffer_size must be a non-negative integer, got {buffer_size!r}")
        self.buffer_size = None if buffer_size is None else int(buffer_size)
        self.verify_crc = bool(verify_crc)

    def params(self):
        p = {"compression_type": self.compression_type}
        if self.buffer_size is not None:
            p["buffer_size"] = self.buffer_size
        if not self.verify_crc:
            p["verify_crc"] = False
        return p


@builds(TFRecordReader)
class TFRecordIterator(FileRecordsIterator):
    def open_file(self, name, offset):
        node = self.node
        offset = offset or 0
        # tf.data's buffer_size is its read buffer (256 KiB by default); we read the reader's blocks (512 KiB
        # with the C walker, 2 MiB without) unless told otherwise, and never less than 64 KiB (per-block
        # work would then dominate).
        block = max(node.buffer_size, 1 << 16) if node.buffer_size else None
        stream = fs.open_stream(name, node.compression_type, offset, node.remote_options)
        return tfrecord.RecordReader(stream, name, offset, verify=node.verify_crc, block_size=block)


class TFRecordDataset(Dataset):
    """``tf.data.TFRecordDataset(filenames, compression_type=None, buffer_size=None, num_parallel_reads=None)``.

    ``filenames``: a path/URL, a (nested) list of them, or a Dataset of scalar strings. ``compression_type``:
    None or "" (none), "GZIP", "ZLIB"; anything else raises ValueError (TensorFlow would read the file
    uncompressed). ``num_parallel_reads=k`` takes one record from each of k open files in turn (interleave
    with cycle k, block 1); AUTOTUNE uses a fixed cycle of ``reader.AUTOTUNE_CYCLE_LENGTH`` (4) so the order
    does not depend on the machine. ``verify_crc=False`` (jaxfeed extension) skips the CRC checks.
    ``storage_options`` (jaxfeed extension): for remote URLs, timeouts and retries (see ``formats/remote.py``)
    and fsspec's options (e.g. ``{"headers": {...}}`` for http).
    """

    __slots__ = ()

    def __init__(self, filenames, compression_type=None, buffer_size=None, num_parallel_reads=None, name=None,
                 *, verify_crc=True, storage_options=None):
        names = filenames_node(filenames, "TFRecordDataset")
        reads = check_parallel_reads(num_parallel_reads, "TFRecordDataset")
        compression_type = fs.check_compression(compression_type, "TFRecordDataset")
        if reads is None:
            node = TFRecordReader(names, compression_type, buffer_size, verify_crc, storage_options)
        else:
            def read_one(filename):
                return TFRecordDataset(filename, compression_type, buffer_size, verify_crc=verify_crc,
                                       storage_options=storage_options)

            node = parallel_reads(Dataset(names), read_one, reads)._node
        if name is not None:
            node.name = str(name)
        super().__init__(node)
