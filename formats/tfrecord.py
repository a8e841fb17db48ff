"""TFRecord framing: a block reader that finds, checks and slices many records per call, and the writer.

A record is ``uint64 LE length · uint32 LE masked CRC32C(length bytes) · payload · uint32 LE masked
CRC32C(payload)`` (docs/tf-behaviour.md#tfrecord). The Python path works on large blocks (2 MiB by default: as fast as 4
MiB here, faster than 1 MiB, and kinder to the caches); the C path reads 512 KiB blocks into a reused buffer:

1. ``locate`` walks the headers of a block. Once several consecutive records have the same length (the common
   case: fixed-size records, or runs of them) it checks a whole run at once through a strided numpy view of
   the length fields; elsewhere it steps record by record in a tight loop (~0.2 µs each).
2. ``check`` verifies them in bulk. A run of same-size records sits at a fixed stride, so its stored CRCs
   are strided numpy views, its length CRC is one value, and its payloads come out of one strided ``V<n>``
   view's ``tolist()`` (the bytes objects are made in C). Varying lengths fall back to numpy over all
   length fields and a list comprehension of slices. Payload CRCs are google-crc32c's C code through
   ``map`` (no Python frame per record) and are compared with one vectorised comparison.
3. Records before the first damaged one are returned together with the error, which the caller raises
   after delivering them (tf.data's order).

Where the optional C extension ``_tfrecord_c`` is built (``formats/_tfrecord_c.c``), ``RecordReader`` hands
steps 1-2 to its ``split_records``: one C call per block walks the headers, checks both CRCs (SSE4.2
where the CPU has it) and makes the payload bytes objects, stopping at the first incomplete or damaged
record exactly where the Python path does, so records, offsets and errors are the same. It reuses the
bytes objects of records the consumer has dropped (a ring of the last few MiB it made; see the C file):
a malloc and a free per record were ~15% of a read of 1 KiB records.
``JAXFEED_NO_C_EXT=1`` (at import) forces the Python path.

Damage (tf.data's messages, docs/tf-behaviour.md#tfrecord): a bad length CRC is "corrupted record at <offset> (Is
this even a TFRecord file?)" and ends the file (the next record cannot be found); a bad payload CRC is
"corrupted record at <offset>" and reading goes on with the next record (the verified length still frames
it), so ``ignore_errors`` skips just that record; a file that ends inside a payload or its CRC is
"truncated record at <offset>". A file that ends inside a 12-byte header is a clean end
of file, as in TensorFlow (verified at every cut point): we follow it so ported pipelines see the same
records, at the cost of not noticing a file cut right after a record boundary + a few bytes.
"""

from __future__ import annotations

import itertools
import struct

import numpy as np

from jaxfeed.pipeline import c_extensions, errors

from . import crc, fs

HEADER = 12  # length (8) + its masked CRC (4)
FRAMING = 16  # header + payload CRC (4)
BLOCK_SIZE = 2 << 20  # the Python path's blocks (each read a fresh bytes object; see the module doc)
# The C path reads into one reused buffer per stream (see RecordReader): no page faults on fresh memory, so
# smaller blocks cost little (~10% vs 2 MiB here) and every open file holds less (P3's peak RSS 55 -> 22 MiB).
REUSED_BLOCK_SIZE = 512 << 10
# A stream's first read is this small and each later one 4x larger, up to the block size: the first records
# come after a 256 KiB read instead of a whole block (time to first batch), and the files an interleave
# opens ahead hold little until they are read in earnest.
FIRST_READ = 256 << 10
READ_GROWTH = 4
TAIL_COPY = 64 << 10  # a partial record up to this size is copied out so that its chunk can be freed
# (and the room a reused read buffer keeps beyond a block for the partial record carried over)
# A closed reader hands its reused buffer to the next reader opened (an interleave goes through its files a
# few at a time): a fresh buffer costs allocation, zeroing and page faults, ~6% of P3's read stage. At most
# SPARE_BUFFERS are kept (each about REUSED_BLOCK_SIZE + TAIL_COPY; larger ones, grown for a big record, go).
SPARE_BUFFERS = 4
_spare_buffers: list = []
_LENGTH = struct.Struct("<Q")
_HEADER = struct.Struct("<QI")
_CRC = struct.Struct("<I")
_RUN_MIN = 8  # same-size records in a row before numpy takes over (and the least a strided run is worth)


def _load_c_extension():
    """The optional C walker (``_tfrecord_c.split_records``), or None: not built (no compiler at install
    time) or disabled with ``JAXFEED_NO_C_EXT=1`` (read at import time; tests flip ``_split_records``)."""
    c = c_extensions.load("jaxfeed.formats._tfrecord_c")
    return None if c is None else c.split_records


_split_records = _load_c_extension()


def locate(buf: bytes, pos: int, end: int):
    """Starts and payload lengths of the complete records in ``buf[pos:end]`` (lengths unverified), and the
    position after the last one. Records are taken on trust here; ``check`` verifies them in order, so a
    garbage length only ever affects records after the first bad header.

    A tight loop steps record by record (~0.2 µs each); after ``_RUN_MIN`` records of one size in a row it
    takes the rest of that run in one vectorised step."""
    starts, lengths = [], []
    add_start, add_length = starts.append, lengths.append
    unpack = _LENGTH.unpack_from
    limit = end - HEADER
    previous, same, runs = -1, 0, False
    while pos <= limit:
        (length,) = unpack(buf, pos)
        following = pos + length + FRAMING
        if following > end:
            break
        add_start(pos)
        add_length(length)
        pos = following
        if length != previous:
            previous = length
            same = 0
        elif same < _RUN_MIN:
            same += 1
        else:  # a run of same-size records: check the rest of it at once
            size = length + FRAMING
            fit = (end - pos) // size
            if fit:
                view = np.ndarray((fit,), dtype="<u8", buffer=buf, offset=pos, strides=(size,))
                equal = view == length
                run = fit if equal.all() else int(np.argmin(equal))
                if run:
                    runs = True
                    add_start(np.arange(pos, pos + run * size, size, dtype=np.int64))
                    add_length(np.full(run, length, dtype=np.int64))
                    pos += run * size
            same = 0
    if not runs:
        return np.array(starts, dtype=np.int64), np.array(lengths, dtype=np.int64), pos
    return _flatten(starts), _flatten(lengths), pos


def _flatten(parts) -> np.ndarray:
    """Mixed Python ints and numpy runs -> one int64 array (in order)."""
    pieces, scalars = [], []
    for p in parts:
        if isinstance(p, np.ndarray):
            if scalars:
                pieces.append(np.array(scalars, dtype=np.int64))
                scalars = []
            pieces.append(p)
        else:
            scalars.append(p)
    if scalars:
        pieces.append(np.array(scalars, dtype=np.int64))
    return np.concatenate(pieces)


def runs_of(lengths: np.ndarray):
    """``[(lo, hi), ...]``: the runs of equal lengths (consecutive same-size records sit at a fixed stride,
    so a run is one strided numpy view), or None where lengths mostly vary."""
    n = len(lengths)
    change = np.flatnonzero(lengths[1:] != lengths[:-1]) + 1
    if len(change) * _RUN_MIN > n:
        return None
    bounds = [0] + change.tolist() + [n]
    return list(zip(bounds[:-1], bounds[1:]))


def _u32_fields(buf: bytes, offsets: np.ndarray, lengths: np.ndarray, runs) -> np.ndarray:
    """The little-endian uint32 at each offset (the stored CRCs)."""
    if runs is None:
        arr = np.frombuffer(buf, dtype=np.uint8)
        return arr[offsets[:, None] + np.arange(4)].view("<u4").ravel()
    parts = [np.ndarray((hi - lo,), dtype="<u4", buffer=buf, offset=int(offsets[lo]),
                        strides=(int(lengths[lo]) + FRAMING,)) for lo, hi in runs]
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _length_crcs(buf: bytes, starts: np.ndarray, lengths: np.ndarray, runs) -> np.ndarray:
    """What each record's length CRC should be: one C call per run of equal lengths, else numpy over the
    8-byte length fields of all records at once."""
    if runs is None:
        arr = np.frombuffer(buf, dtype=np.uint8)
        return crc.masked_crc32c_rows(arr[starts[:, None] + np.arange(8)])
    values = [crc.masked_crc32c(_LENGTH.pack(int(lengths[lo]))) for lo, _ in runs]
    return np.repeat(np.array(values, dtype=np.uint32), [hi - lo for lo, hi in runs])


def check(buf: bytes, starts: np.ndarray, lengths: np.ndarray, verify: bool):
    """The payloads of the located records up to the first damaged one, and the index of that one (or -1)
    with whether its header (True) or its payload (False) is bad."""
    n = len(starts)
    bad, bad_header = -1, False
    runs = runs_of(lengths) if n else None
    if verify and n:
        header_ok = _length_crcs(buf, starts, lengths, runs) == _u32_fields(buf, starts + 8, lengths, runs)
        if not header_ok.all():
            bad, bad_header = int(np.argmin(header_ok)), True
            n = bad
            starts, lengths = starts[:n], lengths[:n]
            runs = runs_of(lengths) if n else None
    first = starts + HEADER
    payloads = slice_payloads(buf, first, lengths, runs)
    if verify and n:
        payload_ok = crc.masked_crc32c_many(payloads) == _u32_fields(buf, first + lengths, lengths, runs)
        if not payload_ok.all():
            bad, bad_header = int(np.argmin(payload_ok)), False
            del payloads[bad:]
    return payloads, bad, bad_header


def slice_payloads(buf: bytes, first: np.ndarray, lengths: np.ndarray, runs) -> list:
    """``[buf[a:a+n] ...]`` for each payload. A run of same-size records is one strided numpy view of a
    ``V<n>`` dtype whose ``tolist()`` makes the bytes objects in C (~30% faster than slicing one by one);
    varying sizes fall back to a list comprehension."""
    if len(first) == 0:
        return []
    if runs is None:
        return [buf[a:b] for a, b in zip(first.tolist(), (first + lengths).tolist())]
    out = []
    for lo, hi in runs:
        size = int(lengths[lo])
        if hi - lo >= _RUN_MIN and size > 0:
            view = np.ndarray((hi - lo,), dtype=f"V{size}", buffer=buf, offset=int(first[lo]),
                              strides=(size + FRAMING,))
            out += view.tolist()
        else:
            out += [buf[a:a + size] for a in first[lo:hi].tolist()]
    return out


def corrupted(filename: str, offset: int, header: bool) -> errors.DataLossError:
    hint = " (Is this even a TFRecord file?)" if header else ""
    return fs.with_location(errors.DataLossError(
        f"{filename}: corrupted record at {offset}{hint}", "TFRecordDataset"), filename, offset)


def truncated(filename: str, offset: int, have: int, need: int) -> errors.DataLossError:
    return fs.with_location(errors.DataLossError(
        f"{filename}: truncated record at {offset} (the file ends after {have} of the record's {need} bytes)",
        "TFRecordDataset"), filename, offset)


class RecordReader:
    """Reads one TFRecord stream block by block. ``read_block()`` returns ``(payloads, offsets, error)``:
    the next records, the stream offset of each, and a damage error to raise after them (then the stream
    is finished); ``([], [], None)`` at a clean end."""

    def __init__(self, stream, filename: str, offset: int = 0, verify: bool = True, block_size: int | None = None):
        self._stream = stream
        self._filename = filename
        self._verify = verify
        # With the C walker (which copies each payload into its own bytes object) and a stream that can
        # ``readinto``, blocks are read into one reused buffer: a fresh bytes object per read costs page
        # faults on every new page, which took half of the reader's time. ``_buf`` is then a view of its
        # first ``_end`` bytes.
        self._reuse = _split_records is not None and callable(getattr(stream, "readinto", None))
        if block_size is None:
            block_size = REUSED_BLOCK_SIZE if self._reuse else BLOCK_SIZE
        self._block_size = max(int(block_size), 1)
        self._read_size = min(FIRST_READ, self._block_size)  # ramps up to _block_size (see FIRST_READ)
        self._buf = b""
        self._pos = 0
        self._base = offset  # stream offset of self._buf[0]
        self._done = False
        self._next = None  # (chunk, start): where to go on after a bridge buffer
        self._mem = bytearray()
        if self._reuse:
            try:
                self._mem = _spare_buffers.pop()  # (pop is atomic: readers open on several threads)
            except IndexError:
                pass
        self._end = 0

    @property
    def can_continue(self) -> bool:
        """After an error: whether records may follow in this file (a bad payload CRC) or not."""
        return not self._done

    @property
    def offset(self) -> int:
        """Stream offset of the first record not yet returned."""
        return self._base + self._pos

    def read_block(self):
        if self._done:
            return [], _EMPTY, None
        while True:
            buf = self._buf
            if _split_records is not None:  # the C walker: framing, both CRCs and the slices in one call
                payloads, starts, end, bad = _split_records(buf, self._pos, self._verify)
                if payloads or bad is not None:
                    offsets = np.frombuffer(starts, dtype=np.int64) + self._base
                    if bad is None:
                        self._done_with(buf, end)
                        return payloads, offsets, None
                    if bad == "length":  # the records before it were handed out: the offset is the bad header's
                        self._pos = end
                        self._done = True
                    else:
                        self._pos = end + _LENGTH.unpack_from(buf, end)[0] + FRAMING
                    return payloads, offsets, corrupted(self._filename, end + self._base, bad == "length")
                error = self._fill()
                if error is not None or self._done:
                    self._done = True
                    return [], _EMPTY, error
                continue
            starts, lengths, end = locate(buf, self._pos, len(buf))
            if len(starts):
                payloads, bad, bad_header = check(buf, starts, lengths, self._verify)
                offsets = starts[:len(payloads)] + self._base
                if bad >= 0:
                    if bad_header:  # the length cannot be trusted: no way to find the next record
                        self._pos = int(starts[bad])  # (after the records handed out with this error)
                        self._done = True
                    else:  # the framing holds: go on after the bad record (ignore_errors skips just it)
                        self._pos = int(starts[bad] + lengths[bad]) + FRAMING
                    return payloads, offsets, corrupted(self._filename, int(starts[bad]) + self._base, bad_header)
                self._done_with(buf, int(end))
                return payloads, offsets, None
            error = self._fill()
            if error is not None or self._done:
                self._done = True
                return [], _EMPTY, error

    def _done_with(self, buf, end: int):
        """Records up to ``end`` were handed out: keep only the (partial) record after them, so the block's
        chunk is freed while its records are still in use (they are copies) -- one chunk less per open file."""
        tail = len(buf) - end
        if not self._reuse and self._next is None and tail <= TAIL_COPY:
            self._buf = buf[end:]
            self._base += end
            self._pos = 0
        else:
            self._pos = end

    def _next_read(self, buf, pos: int, have: int):
        """(bytes to read next, length of the partial record at ``pos`` or None, error or None).

        Reads ramp up from ``FIRST_READ`` to the block size. A record larger than that is read in one go
        only when the file is known to hold it; a length the file cannot hold is a truncated record at once
        (nothing read, nothing allocated). Where the size is not known (a compressed stream), the read is at
        most as large as what is already held, so memory grows only with bytes that exist: a damaged length
        (even one with a valid CRC, e.g. 8-byte ids that lost a span) never allocates its claimed size."""
        want = self._read_size
        self._read_size = min(self._block_size, self._read_size * READ_GROWTH)
        if have < HEADER:
            return want, None, None
        length, stored = _HEADER.unpack_from(buf, pos)
        if self._verify and crc.masked_crc32c(bytes(buf[pos:pos + 8])) != stored:
            return want, length, corrupted(self._filename, self._base + pos, True)
        rest = length + FRAMING - have
        if rest <= want:
            return want, length, None
        remaining = fs.remaining_bytes(self._stream)
        if remaining is None:
            return max(want, min(rest, have)), length, None
        if rest > remaining:
            return 0, length, truncated(self._filename, self._base + pos, have + remaining, length + FRAMING)
        return rest, length, None

    def _fill_reused(self):
        """``_fill`` for the reused buffer: move the partial record at ``_pos`` to the front, then read
        into the space after it (growing the buffer only for a record larger than it)."""
        mem, pos, end = self._mem, self._pos, self._end
        have = end - pos
        want, length, error = self._next_read(mem, pos, have)
        if error is not None:
            return error
        self._buf = b""  # release the view: the buffer may be rewritten below
        if len(mem) < have + want:  # room for the usual partial record too, so the next fill fits
            grown = bytearray(have + want + TAIL_COPY)
            grown[:have] = mem[pos:end]
            self._mem = mem = grown
        elif have and pos:
            mem[:have] = mem[pos:end]
        with memoryview(mem) as view:
            n = self._stream.readinto(view[have:have + want]) or 0
        self._base += pos
        self._pos = 0
        self._end = have + n
        self._buf = memoryview(mem)[:self._end]
        if not n:
            self._done = True
            if have >= HEADER:
                return truncated(self._filename, self._base, have, length + FRAMING)
        return None

    def _fill(self):
        """Read more so that the record at ``_pos`` becomes complete; an error, or None (``_done`` at EOF).

        A record that straddles two reads is completed in a small *bridge* buffer (the tail plus the head
        of the next chunk) instead of concatenating whole chunks: that copy would cost as much as the
        read itself."""
        if self._reuse:
            return self._fill_reused()
        if self._next is not None:  # the bridge is used up: carry on in the chunk after it
            chunk, start = self._next
            self._next = None
            self._base += len(self._buf) - start
            self._buf, self._pos = chunk, start
            return None
        buf, pos = self._buf, self._pos
        have = len(buf) - pos
        want, length, error = self._next_read(buf, pos, have)
        if error is not None:
            return error
        chunk = self._stream.read(want)
        if not chunk:
            self._done = True
            if have >= HEADER:
                return truncated(self._filename, self._base + pos, have, length + FRAMING)
            return None  # nothing left, or the file ends inside a header: a clean end (see module doc)
        self._base += pos
        self._pos = 0
        if not have:
            self._buf = chunk
            return None
        tail = buf[pos:]
        if length is None and have + len(chunk) >= HEADER:
            length = _LENGTH.unpack_from(tail + chunk[:HEADER - have])[0]
        need = None if length is None else length + FRAMING - have
        if need is not None and need < len(chunk):
            self._buf = tail + chunk[:need]
            self._next = (chunk, need)
        else:
            self._buf = tail + chunk
        return None

    def close(self):
        # dropping _buf drops the only view of mem (records are copies): the next reader may overwrite it
        mem, self._buf, self._mem = self._mem, b"", bytearray()
        spare = self._reuse and 0 < len(mem) <= 2 * (REUSED_BLOCK_SIZE + TAIL_COPY)
        if spare and len(_spare_buffers) < SPARE_BUFFERS:
            _spare_buffers.append(mem)
        if self._stream is not None:
            self._stream.close()
            self._stream = None


_EMPTY = np.empty(0, dtype=np.int64)


def frame(record: bytes) -> bytes:
    """One record's bytes on disk."""
    header = _LENGTH.pack(len(record))
    return b"".join((header, struct.pack("<I", crc.masked_crc32c(header)), record,
                     struct.pack("<I", crc.masked_crc32c(record))))


def frame_many(records) -> bytes:
    """Many records framed into one buffer (the writer's and the benchmark's bulk path): the length CRCs
    in numpy, the payload CRCs in C, the headers packed by ``struct`` without a Python loop body."""
    records = [r if type(r) is bytes else bytes(r) for r in records]
    lengths = np.fromiter(map(len, records), dtype="<u8", count=len(records))
    length_crcs = crc.masked_crc32c_rows(lengths.view(np.uint8).reshape(-1, 8))
    headers = map(_HEADER.pack, lengths.tolist(), length_crcs.tolist())
    footers = map(_CRC.pack, crc.masked_crc32c_many(records).tolist())
    return b"".join(itertools.chain.from_iterable(zip(headers, records, footers)))


class TFRecordOptions:
    """``tf.io.TFRecordOptions``: the compression of a TFRecord file and the compressor's settings.

    Accepted for compatibility but without effect here: ``flush_mode``, ``input_buffer_size``,
    ``output_buffer_size``, ``compression_method`` (deflate is the only method)."""

    compression_type_map = {"": "", "GZIP": "GZIP", "ZLIB": "ZLIB"}

    def __init__(self, compression_type=None, flush_mode=None, input_buffer_size=None, output_buffer_size=None,
                 window_bits=None, compression_level=None, compression_method=None, mem_level=None,
                 compression_strategy=None):
        self.compression_type = fs.check_compression(compression_type, "TFRecordOptions")
        self.flush_mode = flush_mode
        self.input_buffer_size = input_buffer_size
        self.output_buffer_size = output_buffer_size
        self.window_bits = window_bits
        self.compression_level = compression_level
        self.compression_method = compression_method
        self.mem_level = mem_level
        self.compression_strategy = compression_strategy

    @classmethod
    def get_compression_type_string(cls, options) -> str:
        if options is None or isinstance(options, str):
            return fs.check_compression(options, "TFRecordOptions")
        return options.compression_type

    def __repr__(self):
        return f"TFRecordOptions(compression_type={self.compression_type!r})"


class TFRecordWriter:
    """``tf.io.TFRecordWriter(path, options=None)``: ``write(record)``, ``flush()``, ``close()``; a context
    manager. ``options`` is a ``TFRecordOptions`` or a compression type string. Uncompressed output is
    byte-identical to TensorFlow's; compressed output decompresses to the identical stream."""

    def __init__(self, path, options=None):
        if isinstance(options, TFRecordOptions):
            self._options = options
        else:
            self._options = TFRecordOptions(options)
        o = self._options
        self.path = fs.as_path(path)
        self._file = fs.open_output(
            self.path, o.compression_type,
            level=-1 if o.compression_level is None else int(o.compression_level),
            mem_level=8 if o.mem_level is None else int(o.mem_level),
            strategy=0 if o.compression_strategy is None else int(o.compression_strategy),
            window_bits=o.window_bits)

    def write(self, record) -> None:
        if self._file is None:
            raise errors.FailedPreconditionError(f"{self.path}: the writer is closed.", "TFRecordWriter")
        if isinstance(record, str):
            record = record.encode("utf-8")
        self._file.write(frame(bytes(record)))

    def write_many(self, records) -> None:
        """Write many records with one framing pass (what bulk writers and the benchmark use)."""
        if self._file is None:
            raise errors.FailedPreconditionError(f"{self.path}: the writer is closed.", "TFRecordWriter")
        self._file.write(frame_many(records))

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
