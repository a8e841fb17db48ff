"""``cache``: record the elements of the first complete pass; later passes replay them (docs/tf-behaviour.md#cache).

- ``filename=""``: in memory. The recording lives in a ``CacheStore`` created with the node -- the node's
  one runtime slot. Passes copy nodes with ``copy.copy``, so every rewritten copy of this node shares the
  store, and so every iterator of the same Dataset object; a Dataset built again gets a new store.
- ``filename=prefix``: in files ``<prefix>.index`` and ``<prefix>.data-00000-of-00001`` (format in
  ``iterators/cache_file.py``), read by any dataset with the same prefix, in this process or another.

A partially read pass (``cache().take(k)``) discards what it recorded, with a logged warning.
"""

from __future__ import annotations

import threading

from .base import ShardWalk
from .common import PassThrough


class CacheStore:
    """The elements of a completed in-memory pass (``None`` until one completes)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.elements: list | None = None

    def publish(self, elements: list) -> None:
        with self._lock:
            if self.elements is None:  # the first complete pass wins
                self.elements = elements


class Cache(PassThrough):
    kind = "Cache"
    shard_walk = ShardWalk.THROUGH
    keeps_batch_dim = True

    def __init__(self, input_node, filename=""):
        super().__init__((input_node,))
        if filename is None:  # tf.data converts it to a string tensor: None is a ValueError there
            raise ValueError("cache: `filename` must be a string (\"\" for memory), got None.")
        if hasattr(filename, "__fspath__"):
            filename = filename.__fspath__()
        if not isinstance(filename, str):
            raise TypeError(f"cache: `filename` must be a string, got {filename!r} ({type(filename).__name__})")
        self.filename = filename
        self.store = CacheStore()  # runtime slot, shared by copies of this node (see module docstring)

    def params(self):
        return {"filename": self.filename}

    def cardinality(self):
        return self.inputs[0].cardinality()
