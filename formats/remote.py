"""Remote files (any URL that is not local): range reads that are verified, timed out and retried.

fsspec's own file objects trusted every answer: a 206 with an empty body ended a file early, a short one
was placed by its block cache as if full (records dropped and repeated), a stalled server blocked for
aiohttp's 300 s, and 500/503, reset connections or a server ignoring Range surfaced as raw aiohttp errors
(a 500 at open as "No such file"). ``RemoteFile`` asks for byte ranges itself and checks every answer
against the offset it asked for and the size the server announced:

- a short but self-consistent answer (a 206 whose Content-Range starts at the asked offset) is kept and
  the rest asked for; an answer elsewhere, an empty one before the end, or one whose body does not match
  its Content-Range is retried, then ``DataLossError``; a size that changes while reading is
  ``DataLossError`` at once;
- a 200 answer to a range request (a server without range support) is the whole file: it is kept and
  served from memory, so the file is downloaded once;
- timeouts, reset connections and 408/425/429/500/502/503/504 are retried with exponential back-off, then
  ``DeadlineExceededError`` (timeouts) or ``UnavailableError``; 404 is ``NotFoundError``, 401
  ``UnauthenticatedError``, 403 ``PermissionDeniedError``, other statuses ``UnknownError``.

Every error names the URL and the byte offset of the read (``filename`` / ``offset`` attributes too).

``storage_options`` (the readers' keyword): the keys below are jaxfeed's, everything else goes to the
fsspec filesystem (for http: ``headers``, ``client_kwargs``, ...).

- ``timeout``: seconds an http(s) request may wait for the server (connecting, or between bytes of an
  answer); ``None`` for no limit. Default ``DEFAULT_TIMEOUT``. Other filesystems keep their own timeouts
  (set them through their fsspec options); their timeouts and connection errors are retried all the same.
- ``retries``: how many times a failed request is tried again. Default ``DEFAULT_RETRIES``.
- ``retry_backoff``: the first wait before a retry, doubled each time up to ``MAX_BACKOFF``.
- ``retry_sleep``: the function that waits (``time.sleep``); tests pass a recorder.
"""

from __future__ import annotations

import asyncio
import io
import re
import time

from jaxfeed.pipeline import errors

# A read smaller than this asks for this much and keeps the rest for the next reads: pyarrow reads a
# Parquet footer and column chunks in small pieces, and one request each would cost a round trip each.
READ_AHEAD = 1 << 20
DEFAULT_TIMEOUT = 60.0
DEFAULT_RETRIES = 3
DEFAULT_BACKOFF = 0.5
MAX_BACKOFF = 16.0
_TRANSIENT_STATUS = {408, 425, 429, 500, 502, 503, 504}
_HTTP = ("http://", "https://")


class RemoteOptions:
    """``storage_options`` split into jaxfeed's keys and fsspec's (checked when a reader is made)."""

    def __init__(self, storage_options=None, what: str = "reader"):
        if storage_options is None:
            storage_options = {}
        if not isinstance(storage_options, dict):
            raise TypeError(f"{what}: `storage_options` must be a dict or None, got {storage_options!r}")
        opts = dict(storage_options)
        timeout = opts.pop("timeout", DEFAULT_TIMEOUT)
        if timeout is not None and (isinstance(timeout, bool) or not float(timeout) > 0):
            raise ValueError(f"{what}: storage_options['timeout'] must be a positive number of seconds or None, "
                             f"got {timeout!r}")
        retries = opts.pop("retries", DEFAULT_RETRIES)
        if isinstance(retries, bool) or int(retries) != retries or retries < 0:
            raise ValueError(f"{what}: storage_options['retries'] must be a non-negative integer, got {retries!r}")
        backoff = opts.pop("retry_backoff", DEFAULT_BACKOFF)
        if isinstance(backoff, bool) or not float(backoff) >= 0:
            raise ValueError(f"{what}: storage_options['retry_backoff'] must be >= 0 seconds, got {backoff!r}")
        sleep = opts.pop("retry_sleep", time.sleep)
        if not callable(sleep):
            raise TypeError(f"{what}: storage_options['retry_sleep'] must be callable, got {sleep!r}")
        self.timeout = None if timeout is None else float(timeout)
        self.retries = int(retries)
        self.backoff = float(backoff)
        self.sleep = sleep
        self.fsspec = opts

    def waits(self):
        """The waits before each retry."""
        delay = self.backoff
        for _ in range(self.retries):
            yield min(delay, MAX_BACKOFF)
            delay *= 2


class _Retry(Exception):
    """A failure worth another try; ``final`` is the jaxfeed error class if none is left."""

    def __init__(self, final, why: str):
        super().__init__(why)
        self.final, self.why = final, why


def _located(cls, url: str, offset: int, why: str) -> errors.OpError:
    exc = cls(f"{url}: {why} (reading at byte offset {offset})", "read")
    exc.filename, exc.offset = url, offset
    return exc


class RemoteFile(io.RawIOBase):
    """A read-only, seekable, verified view of one remote file (see the module doc)."""

    def __init__(self, url: str, options: RemoteOptions):
        super().__init__()
        self.url = url
        self._options = options
        self._pos = 0
        self._whole = None  # the whole file, when a server answered a range with it
        self._ahead = (0, b"")  # (offset, bytes): checked bytes read ahead (READ_AHEAD)
        if url.startswith(_HTTP):
            self._backend = _HttpBackend(url, options)
        else:
            self._backend = _FsspecBackend(url, options)
        self.size = self._retrying(0, self._backend.size)

    # ------------------------------------------------------------------ retries
    def _retrying(self, offset: int, attempt, *args):
        waits = self._options.waits()
        tries = 0
        while True:
            tries += 1
            try:
                return attempt(*args)
            except _Retry as e:
                wait = next(waits, None)
                if wait is None:
                    why = e.why if tries == 1 else f"{e.why}; {tries} attempts"
                    raise _located(e.final, self.url, offset, why) from None
                self._options.sleep(wait)

    # ------------------------------------------------------------------ reading
    def _fetch(self, start: int, n: int) -> bytes:
        """Up to ``n`` bytes at ``start`` (fewer only at the end of the file, or where the server answered
        with fewer: a checked partial answer)."""
        if self._whole is not None:
            return self._whole[start:start + n]
        at, ahead = self._ahead
        if at <= start < at + len(ahead):
            return ahead[start - at:start - at + n]
        size = self.size
        want = max(n, READ_AHEAD)
        end = start + want if size is None else min(start + want, size)
        if start >= end:
            return b""
        data = self._retrying(start, self._fetch_once, start, end)
        if len(data) <= n:
            return data
        self._ahead = (start, data)
        return data[:n]

    def _fetch_once(self, start: int, end: int) -> bytes:
        body, whole, total = self._backend.fetch(start, end)
        size = self.size
        if total is not None and size is not None and total != size:
            raise _located(errors.DataLossError, self.url, start,
                           f"the file changed size while being read ({size} bytes at open, now {total})")
        if whole:
            if size is not None and len(body) != size:
                raise _Retry(errors.DataLossError, f"the server sent {len(body)} bytes for a {size}-byte file")
            self._whole = body
            return body[start:end]
        if not body and size is not None:
            raise _Retry(errors.DataLossError, f"the server sent 0 of the {end - start} bytes asked for (the "
                         f"file has {size} bytes)")
        if len(body) > end - start:
            raise _Retry(errors.DataLossError, f"the server sent {len(body)} bytes for a range of {end - start}")
        return body

    def readinto(self, b) -> int:
        with memoryview(b) as view:
            data = self.read(len(view))
            view[:len(data)] = data
        return len(data)

    def read(self, n: int = -1) -> bytes:
        if self.closed:
            raise ValueError("read of a closed file")
        if n is None or n < 0:
            n = (self.size - self._pos) if self.size is not None else 1 << 62
        parts = []
        while n > 0:
            chunk = self._fetch(self._pos, n)
            if not chunk:
                break
            parts.append(chunk)
            self._pos += len(chunk)
            n -= len(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def readall(self) -> bytes:
        return self.read(-1)

    def remaining(self):
        """Bytes after the position (None when the server did not say how large the file is)."""
        return None if self.size is None else max(self.size - self._pos, 0)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence == 0:
            pos = offset
        elif whence == 1:
            pos = self._pos + offset
        elif whence == 2:
            if self.size is None:
                raise _located(errors.UnimplementedError, self.url, self._pos,
                               "the server does not say how large the file is, so it cannot seek from its end")
            pos = self.size + offset
        else:
            raise ValueError(f"invalid whence {whence}")
        if pos < 0:
            raise ValueError(f"negative seek position {pos}")
        self._pos = pos
        return pos

    def tell(self) -> int:
        return self._pos


class _HttpBackend:
    """Range requests on fsspec's aiohttp session (its headers, auth and client settings), answers checked
    by status and Content-Range."""

    def __init__(self, url: str, options: RemoteOptions):
        import aiohttp
        import fsspec

        self._aiohttp = aiohttp
        self.url = url
        self._fs = fsspec.filesystem("https" if url.startswith("https://") else "http", **options.fsspec)
        seconds = options.timeout
        self._timeout = None if seconds is None else aiohttp.ClientTimeout(
            total=None, connect=None, sock_connect=seconds, sock_read=seconds)
        self._seconds = seconds

    def _run(self, coroutine_fn, *args):
        from fsspec.asyn import sync

        aiohttp = self._aiohttp
        try:
            return sync(self._fs.loop, coroutine_fn, *args)
        except (asyncio.TimeoutError, aiohttp.ServerTimeoutError):
            raise _Retry(errors.DeadlineExceededError, f"no answer from the server within the timeout of "
                         f"{self._seconds} s (storage_options['timeout'])") from None
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, ConnectionError) as e:
            raise _Retry(errors.UnavailableError, f"the connection failed ({type(e).__name__}: {e})") from None
        except aiohttp.ClientError as e:
            raise _Retry(errors.UnavailableError, f"the request failed ({type(e).__name__}: {e})") from None

    def _request_kwargs(self, extra_headers: dict) -> dict:
        kw = dict(self._fs.kwargs)
        kw["headers"] = {**(kw.get("headers") or {}), "Accept-Encoding": "identity", **extra_headers}
        if self._timeout is not None:
            kw["timeout"] = self._timeout
        return kw

    async def _request(self, method: str, headers: dict, read_body: bool):
        session = await self._fs.set_session()
        kw = self._request_kwargs(headers)
        async with session.request(method, self._fs.encode_url(self.url), **kw) as r:
            body = await r.read() if read_body and r.status in (200, 206) else b""
            return r.status, r.reason, dict(r.headers), body

    def _fail(self, status: int, reason, offset: int) -> errors.OpError:
        """The error of a status that is not worth another try (only a real 404 or 410 is NotFound)."""
        cls = {404: errors.NotFoundError, 410: errors.NotFoundError, 401: errors.UnauthenticatedError,
               403: errors.PermissionDeniedError}.get(status, errors.UnknownError)
        return _located(cls, self.url, offset, _answered(status, reason))

    def size(self):
        status, reason, headers, _ = self._run(self._request, "HEAD", {}, False)
        if status in _TRANSIENT_STATUS:
            raise _Retry(errors.UnavailableError, _answered(status, reason))
        if status in (405, 501):  # no HEAD: the size stays unknown, reads still work
            return None
        if status != 200:
            raise self._fail(status, reason, 0)
        length = headers.get("Content-Length")
        if length is None or headers.get("Content-Encoding", "identity") not in ("", "identity"):
            return None
        return int(length)

    def fetch(self, start: int, end: int):
        """(body, is_the_whole_file, total size from Content-Range or None) for bytes [start, end)."""
        status, reason, headers, body = self._run(self._request, "GET", {"Range": f"bytes={start}-{end - 1}"},
                                                  True)
        if status == 200:
            return body, True, None
        if status == 416:
            total = _total(headers.get("Content-Range"))
            return b"", False, total
        if status in _TRANSIENT_STATUS:
            raise _Retry(errors.UnavailableError, _answered(status, reason))
        if status != 206:
            raise self._fail(status, reason, start)
        m = _CONTENT_RANGE.fullmatch(headers.get("Content-Range", "").strip())
        if m is None:
            raise _Retry(errors.DataLossError, f"a 206 answer without a valid Content-Range "
                         f"({headers.get('Content-Range')!r})")
        first, last = int(m.group(1)), int(m.group(2))
        total = None if m.group(3) == "*" else int(m.group(3))
        if first != start or last < first:
            raise _Retry(errors.DataLossError, f"the server sent bytes {first}-{last} when asked for {start}-{end - 1}")
        if len(body) != last - first + 1:
            raise _Retry(errors.DataLossError, f"the server sent {len(body)} of the {last - first + 1} bytes its "
                         f"answer announced")
        return body, False, total


def _answered(status: int, reason) -> str:
    return f"the server answered HTTP {status} {reason or ''}".rstrip()


_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")


def _total(content_range):
    m = re.fullmatch(r"bytes\s+\*/(\d+)", (content_range or "").strip())
    return int(m.group(1)) if m else None


class _FsspecBackend:
    """Any other fsspec protocol: ``cat_file`` ranges, checked by length; timeouts and connection errors
    are retried."""

    def __init__(self, url: str, options: RemoteOptions):
        import fsspec

        self.url = url
        self._fs, self._path = fsspec.core.url_to_fs(url, **options.fsspec)

    def _run(self, fn, *args):
        from fsspec.exceptions import FSTimeoutError

        try:
            return fn(*args)
        except (FSTimeoutError, TimeoutError, asyncio.TimeoutError) as e:
            raise _Retry(errors.DeadlineExceededError, f"no answer in time ({type(e).__name__})") from None
        except ConnectionError as e:
            raise _Retry(errors.UnavailableError, f"the connection failed ({type(e).__name__}: {e})") from None
        except FileNotFoundError:
            raise _located(errors.NotFoundError, self.url, 0, "No such file or directory") from None
        except PermissionError as e:
            raise _located(errors.PermissionDeniedError, self.url, 0, f"Permission denied ({e})") from None

    def size(self):
        info = self._run(self._fs.info, self._path)
        if info.get("type") == "directory":
            raise _located(errors.FailedPreconditionError, self.url, 0, "Is a directory")
        size = info.get("size")
        return None if size is None else int(size)

    def fetch(self, start: int, end: int):
        return self._run(self._fs.cat_file, self._path, start, end), False, None
