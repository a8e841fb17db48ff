"""fsspec glue: every path is a URL (plain local path, ``file://``, ``memory://``, ``http://``, or any protocol
whose fsspec package is installed), opened for block reads with optional GZIP/ZLIB decompression.

Local files bypass fsspec (a raw unbuffered ``open``): our readers ask for megabytes at a time, so Python's
buffering would only add a copy. Remote files are read through ``remote.RemoteFile``: every range read is
checked against the offset asked for and the size announced, and timeouts and transient failures are
retried (a reader's ``storage_options``). Errors become ``jaxfeed.pipeline.errors`` classes that name the path and,
for damaged streams, the byte offset (also set as ``filename`` / ``offset`` attributes for ignore_errors).
"""

from __future__ import annotations

import os
import stat
import zlib

import numpy as np

from jaxfeed.pipeline import errors, filesystem

COMPRESSIONS = {"": None, "GZIP": 16 + zlib.MAX_WBITS, "ZLIB": zlib.MAX_WBITS}
_INFLATE_CHUNK = 1 << 20


def check_compression(compression_type, what: str) -> str:
    """``None``/``""``/``"GZIP"``/``"ZLIB"`` -> the canonical name. TensorFlow only logs an unknown value and
    reads the file uncompressed; we raise (docs/tf-behaviour.md#compression)."""
    if compression_type is None:
        return ""
    if not isinstance(compression_type, str):
        raise TypeError(f"{what}: `compression_type` must be a string or None, got {compression_type!r}")
    name = compression_type.upper()
    if name not in COMPRESSIONS:
        raise ValueError(f"{what}: unknown compression_type {compression_type!r}; use None, '', 'GZIP' or "
                         "'ZLIB'.")
    return name


def as_path(name) -> str:
    """A file name element (``bytes``, ``str``, numpy scalar or 0-d array) as ``str``."""
    if isinstance(name, np.ndarray):
        name = name.item()
    if isinstance(name, (bytes, np.bytes_)):
        return bytes(name).decode("utf-8")
    if isinstance(name, str):
        return str(name)
    raise TypeError(f"file names must be strings, got {name!r} ({type(name).__name__})")


def _local(url: str) -> str | None:
    if "://" not in url:
        return url
    if url.startswith("file://"):
        return url[len("file://"):]
    return None


def with_location(exc: errors.OpError, filename: str, offset: int | None = None) -> errors.OpError:
    exc.filename = filename
    exc.offset = offset
    return exc


def _not_found(url: str, e: Exception) -> errors.OpError:
    if isinstance(e, PermissionError):
        return with_location(errors.PermissionDeniedError(f"{url}; Permission denied", "read"), url)
    if isinstance(e, IsADirectoryError):
        return with_location(errors.FailedPreconditionError(f"{url}; Is a directory", "read"), url)
    return with_location(errors.NotFoundError(f"{url}; No such file or directory", "read"), url)


def open_binary(url: str, mode: str = "rb", options=None):
    """The raw file (read: unbuffered where local; a verified, retried ``remote.RemoteFile`` elsewhere, with
    ``options``, a ``remote.RemoteOptions`` made from a reader's ``storage_options``)."""
    local = _local(url)
    if local is None and "w" not in mode:
        from .remote import RemoteFile, RemoteOptions

        return RemoteFile(url, options if options is not None else RemoteOptions())
    try:
        if local is not None:
            if "w" in mode:
                return open(local, mode)
            return open(local, mode, buffering=0)
        import fsspec

        return fsspec.open(url, mode).open()
    except (FileNotFoundError, PermissionError, IsADirectoryError) as e:
        raise _not_found(url, e) from e


def remaining_bytes(stream) -> int | None:
    """How many bytes ``stream`` holds after its position, or None where that is not known (a decompressed
    stream). Readers bound their reads by it, so a damaged length field never makes them allocate its
    claimed size. A local file is asked again each time (it may have grown since it was opened)."""
    remaining = getattr(stream, "remaining", None)
    if remaining is not None:
        return remaining()
    fileno = getattr(stream, "fileno", None)
    if fileno is None:
        return None
    try:
        st = os.fstat(fileno())
        if not stat.S_ISREG(st.st_mode):  # a pipe or device: its st_size says nothing
            return None
        return max(st.st_size - stream.tell(), 0)
    except (OSError, ValueError):
        return None


class InflatingReader:
    """``read(n)`` of the decompressed bytes of a GZIP or ZLIB file (concatenated members are read on).

    A damaged stream (cut short, even by its trailer alone; or failing to inflate, e.g. a bad checksum)
    first hands out every byte inflated before the damage -- so the records and lines entirely before it
    are delivered -- and then the next ``read`` raises ``DataLossError`` at the uncompressed offset where
    those bytes end. (TensorFlow reads a stream cut short as if it ended there, with no error: a cut that
    falls between records, or in the trailer alone, would lose data silently; docs/formats.md.) An empty
    file is an empty stream, as in TensorFlow."""

    def __init__(self, raw, wbits: int, url: str, kind: str):
        self._raw, self._wbits, self._url, self._kind = raw, wbits, url, kind
        self._inflater = zlib.decompressobj(wbits)
        self._pending = b""  # compressed input not yet fed
        self._started = False
        self._eof = False
        self._damage = None  # why the stream cannot go on: raised once the bytes before it are read
        self._spill = b""  # decompressed beyond what the last read asked for
        self.position = 0  # in the decompressed stream

    def _damaged(self, why: str) -> errors.OpError:
        return with_location(errors.DataLossError(
            f"{self._url}: {why} in {self._kind} stream at uncompressed byte offset {self.position}",
            "read"), self._url, self.position)

    def read(self, n: int) -> bytes:
        parts, have = [], 0
        if self._spill:
            parts.append(self._spill[:n])
            self._spill = self._spill[n:]
            have = len(parts[0])
        while have < n and not self._eof and self._damage is None:
            d = self._inflater
            if d.unconsumed_tail:
                source = d.unconsumed_tail
            else:
                if not self._pending:
                    self._pending = self._raw.read(_INFLATE_CHUNK)
                    if not self._pending:
                        if not self._started or d.eof:
                            self._eof = True
                            break
                        # cut short: hand out what the inflater still holds, then the error
                        self._damage = "truncated data"
                        out = d.flush()
                        if have + len(out) > n:
                            out, self._spill = out[:n - have], out[n - have:]
                        parts.append(out)
                        have += len(out)
                        break
                source, self._pending = self._pending, b""
            try:
                out = d.decompress(source, max(n - have, 1 << 16))
            except zlib.error as e:
                self._damage = f"corrupted data ({e})"
                break
            self._started = True
            if d.eof:  # end of one member: any further bytes start the next one
                self._pending = d.unused_data + self._pending
                self._inflater = zlib.decompressobj(self._wbits)
                self._started = bool(self._pending)
            if out:
                if have + len(out) > n:
                    out, self._spill = out[:n - have], out[n - have:]
                parts.append(out)
                have += len(out)
        self.position += have
        if not have and self._damage is not None and n > 0:
            raise self._damaged(self._damage)
        if len(parts) == 1:
            return parts[0]
        return b"".join(parts)

    def remaining(self):
        return None  # the decompressed size is not known before the end

    def close(self):
        self._raw.close()


def open_stream(url: str, compression: str = "", offset: int = 0, options=None):
    """A reader positioned at ``offset`` of the (decompressed) byte stream of ``url``.

    Uncompressed files seek; compressed ones are decompressed again from the start up to ``offset`` (a
    deflate stream cannot be entered in the middle), so restoring into a GZIP/ZLIB file costs a re-read."""
    raw = open_binary(url, options=options)
    wbits = COMPRESSIONS[compression]
    if wbits is None:
        if offset:
            raw.seek(offset)
        return raw
    stream = InflatingReader(raw, wbits, url, compression)
    while stream.position < offset:
        if not stream.read(min(offset - stream.position, 1 << 22)):
            break
    return stream


class DeflatingWriter:
    def __init__(self, raw, wbits: int, level: int, mem_level: int, strategy: int):
        self._raw = raw
        self._deflater = zlib.compressobj(level, zlib.DEFLATED, wbits, mem_level, strategy)

    def write(self, data) -> None:
        out = self._deflater.compress(data)
        if out:
            self._raw.write(out)

    def flush(self) -> None:
        self._raw.write(self._deflater.flush(zlib.Z_SYNC_FLUSH))
        self._raw.flush()

    def close(self) -> None:
        if self._deflater is not None:
            self._raw.write(self._deflater.flush(zlib.Z_FINISH))
            self._deflater = None
        self._raw.close()


def open_output(url: str, compression: str = "", level: int = zlib.Z_DEFAULT_COMPRESSION,
                mem_level: int = 8, strategy: int = zlib.Z_DEFAULT_STRATEGY, window_bits: int | None = None):
    raw = open_binary(url, "wb")
    wbits = COMPRESSIONS[compression]
    if wbits is None:
        return raw
    if window_bits is not None:
        wbits = window_bits + (16 if compression == "GZIP" else 0)
    return DeflatingWriter(raw, wbits, level, mem_level, strategy)


def glob(patterns) -> list[str]:
    """Every file matching any of ``patterns`` (a URL glob or a list of them), sorted; duplicates kept
    (docs/tf-behaviour.md#list-files). Results keep the pattern's protocol so they can be opened again, and
    a relative local pattern gives relative paths (``pipeline/filesystem.py``'s rule, as ``list_files``)."""
    if isinstance(patterns, (str, bytes)):
        patterns = [patterns]
    found = []
    for pattern in patterns:
        pattern = as_path(pattern)
        matches = filesystem.glob(pattern, files_only=True, keep_relative=True)
        if not matches:
            raise errors.InvalidArgumentError(f"No files matched pattern: {pattern}", "list_files")
        found.extend(matches)
    return sorted(found)
