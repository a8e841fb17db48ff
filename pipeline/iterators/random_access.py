"""The iterator of any random-access source: a position in ``[0, length)``, streamed as indices."""

from __future__ import annotations

import numpy as np

from .base import Iterator
from ..engine.registry import builds
from ..nodes.list_files import ListFiles
from ..nodes.range import Range
from ..nodes.tensor_slices import TensorSlices, Tensors


@builds(ListFiles, Range, TensorSlices, Tensors)
class RandomAccessIterator(Iterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.index_source = node
        self._n = node.length()
        self._pos = 0

    def _next(self):
        pos = self._pos
        if pos >= self._n:
            raise StopIteration
        self._pos = pos + 1
        return self.node.element_at(pos)

    def _next_many(self, n):
        start = self._pos
        stop = min(start + n, self._n)
        if start >= stop:
            return []
        self._pos = stop
        idx = np.arange(start, stop, dtype=np.int64)
        batch = self.node.gather(idx)
        from ..structure import unstack_rows

        return unstack_rows(batch, stop - start)

    def next_indices(self, n):
        start, stop = self.next_span(n)
        return np.arange(start, stop, dtype=np.int64)

    def next_span(self, n):
        """``next_indices`` as ``(start, stop)``: this stream's indices are its positions, consecutive, so a
        batch of them needs no index array (``Node.gather_span``)."""
        start = self._pos
        stop = max(min(start + n, self._n), start)
        self._pos = stop
        return start, stop

    def get_state(self):
        return {"pos": self._pos}

    def set_state(self, state):
        pos = state["pos"]
        if type(pos) is not int or pos < 0 or (self._n >= 0 and pos > self._n):  # a state file is outside input
            raise ValueError(f"position {pos!r:.40} is not in [0, {self._n}]")
        self._pos = pos
