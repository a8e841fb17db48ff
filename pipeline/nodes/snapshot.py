"""``snapshot(path)``: the first complete pass writes the input's elements under ``<path>/<fingerprint>``
(the ``Dataset.save`` layout); later passes -- in this process or another -- read them instead of running
the input. The fingerprint is the input graph's (``graph.fingerprint``: structure, arguments, data, file
lists, seeds), so a changed pipeline writes a snapshot of its own instead of reading a stale one."""

from __future__ import annotations

from .common import PassThrough


class Snapshot(PassThrough):
    kind = "Snapshot"

    def __init__(self, input_node, path, compression="AUTO", reader_func=None, shard_func=None):
        super().__init__((input_node,))
        if hasattr(path, "__fspath__"):
            path = path.__fspath__()
        if not isinstance(path, str) or not path:
            raise TypeError(f"snapshot: `path` must be a non-empty string, got {path!r}")
        if compression not in (None, "", "AUTO"):
            from ..errors import InvalidArgumentError

            raise InvalidArgumentError(f"snapshot: compression={compression!r} is not supported (snapshots are "
                                       "stored uncompressed; 'AUTO' and None are accepted).", "snapshot")
        self.path = path
        self.reader_func = reader_func
        self.shard_func = shard_func

    def params(self):
        return {"path": self.path}

    def functions(self):
        return {k: f for k, f in (("reader_func", self.reader_func), ("shard_func", self.shard_func)) if f}

    def cardinality(self):
        return self.inputs[0].cardinality()
