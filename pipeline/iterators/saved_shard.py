"""Reads one saved shard in blocks of records; state is the position of the next element."""

from __future__ import annotations

from ..errors import DataLossError
from .base import BlockIterator
from .cache_file import CacheReader
from ..engine.registry import builds
from ..nodes.saved_shard import SavedShard

READ_AHEAD = 256


@builds(SavedShard)
class SavedShardIterator(BlockIterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self._pos = 0
        self._reader = None
        self._label = node.label()

    def _next_many(self, n):
        if self._reader is None:
            self._reader = CacheReader(self.node.prefix, self._label, self._pos)
            if self._reader.length != self.node.num_elements:
                raise DataLossError(f"{self._label}: the shard holds {self._reader.length} elements, its save "
                                    f"recorded {self.node.num_elements}.", "load")
        out = self._reader.read(max(1, min(n, READ_AHEAD)))
        self._pos += len(out)
        return out

    def get_state(self):
        return {"pos": self._pos}

    def set_state(self, state):
        self.close()
        self._pos = int(state["pos"])

    def close(self):
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        super().close()
