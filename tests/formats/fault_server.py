"""A loopback HTTP file server whose answers a test can break: the faults of real object stores and CDNs
(a stall, 500/503, a reset connection, a short or empty 206, a server that ignores Range), on 127.0.0.1
only. It stops itself: ``serve()`` is a context manager, and a stalled answer waits at most ``STALL_LIMIT``
seconds (or until the server stops), so no test can leave a thread behind.

``faults`` is a function ``(request) -> action or None`` called for every request; ``request`` has
``method``, ``path``, ``start``/``end`` (the asked range, ``end`` exclusive, None without Range), ``count``
(how many requests of this method and path came before) and ``headers``. Actions:
``("status", code)``, ``("stall",)``, ``("reset",)``, ``("empty206",)`` (a 206 that claims the asked range
but has no body), ``("short206", n)`` (a self-consistent 206 of at most n bytes), ``("ignore_range",)``
(200 with the whole file). None serves the request correctly (206 for a range).
"""

from __future__ import annotations

import contextlib
import http.server
import re
import socket
import struct
import threading
from types import SimpleNamespace

STALL_LIMIT = 20.0


class FaultServer:
    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.faults = lambda request: None
        self.log: list = []  # every request, as (method, path, start, end)
        self.headers_seen: list = []
        self._stop = threading.Event()
        self._counts: dict = {}
        self._lock = threading.Lock()

    def url(self, name: str) -> str:
        return f"{self.base}/{name}"

    @contextlib.contextmanager
    def serve(self):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        self.base = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            yield self
        finally:
            self._stop.set()  # releases stalled answers
            server.shutdown()
            server.server_close()
            thread.join(10)

    def _request(self, method, path, range_header, headers):
        start = end = None
        if range_header:
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", range_header.strip())
            if m:
                start = int(m.group(1))
                end = int(m.group(2)) + 1 if m.group(2) else None
        with self._lock:
            key = (method, path)
            count = self._counts.get(key, 0)
            self._counts[key] = count + 1
            self.log.append((method, path, start, end))
            self.headers_seen.append(dict(headers))
        return SimpleNamespace(method=method, path=path, start=start, end=end, count=count, headers=headers)

    def gets(self, name: str) -> list:
        return [entry for entry in self.log if entry[0] == "GET" and entry[1] == "/" + name]


def _handler(server: FaultServer):
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_HEAD(self):
            self._answer(head=True)

        def do_GET(self):
            self._answer(head=False)

        def _answer(self, head: bool):
            request = server._request(self.command, self.path, self.headers.get("Range"), self.headers)
            data = server.files.get(self.path.lstrip("/"))
            action = server.faults(request)
            kind = action[0] if action else None
            if kind == "stall":
                server._stop.wait(STALL_LIMIT)
                return
            if kind == "reset":  # RST instead of an answer
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True
                return
            if kind == "status":
                self._send(action[1], b"", {}, head)
                return
            if data is None:
                self._send(404, b"", {}, head)
                return
            size = len(data)
            if head or request.start is None or kind == "ignore_range":
                self._send(200, data, {"Accept-Ranges": "bytes"}, head)
                return
            start, end = request.start, min(request.end or size, size)
            if start >= size:
                self._send(416, b"", {"Content-Range": f"bytes */{size}"}, head)
                return
            if kind == "short206":
                end = min(end, start + action[1])
            body = data[start:end]
            content_range = f"bytes {start}-{end - 1}/{size}"
            if kind == "empty206":
                body = b""
            self._send(206, body, {"Content-Range": content_range}, head)

        def _send(self, status, body, headers, head):
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head:
                self.wfile.write(body)

    return Handler
