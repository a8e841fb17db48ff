"""The iterator of ``ElasticSelect``: keeps this worker's positions of its input, over elements or indices."""

from __future__ import annotations

import itertools

import numpy as np

from ..engine.registry import builds
from ..nodes.elastic_select import ElasticSelect
from .base import Iterator

_BLOCK = 4096


@builds(ElasticSelect)
class ElasticSelectIterator(Iterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        self.index_source = self.input.index_source
        self._pos = 0  # input positions consumed so far
        hole_set = set(node.my_holes.tolist())
        start, step = node.frontier + node.tail_offset, node.num_workers
        self._keep = lambda p: p in hole_set or (p >= start and (p - start) % step == 0)

    def _next(self):
        keep = self._keep
        while True:
            element = self.input.next()
            pos = self._pos
            self._pos = pos + 1
            if keep(pos):
                return element

    def _next_many(self, k):
        if self.index_source is not None:
            return super()._next_many(k)
        node = self.node
        while True:
            # never read past the k-th next kept position: the input is consumed as element by element
            last = node.nth_position(node.count_selected_below(self._pos) + k - 1)
            block = self.input.next_many(min(last - self._pos + 1, _BLOCK * node.num_workers))
            if not block:
                return []
            keep = node.selected(np.arange(self._pos, self._pos + len(block), dtype=np.int64))
            self._pos += len(block)
            kept = list(itertools.compress(block, keep.tolist()))
            if kept:
                return kept

    def next_indices(self, k):
        node = self.node
        parts, got = [], 0
        while got < k:
            # exactly enough input positions to reach the (k - got)-th next kept one: never past it
            last = node.nth_position(node.count_selected_below(self._pos) + k - got - 1)
            block = self.input.next_indices(min(last - self._pos + 1, _BLOCK * node.num_workers))
            if len(block) == 0:
                break
            positions = np.arange(self._pos, self._pos + len(block), dtype=np.int64)
            kept = block[node.selected(positions)]
            self._pos += len(block)
            parts.append(kept)
            got += len(kept)
        return np.concatenate(parts) if parts else np.empty(0, np.int64)

    def children(self):
        return [self.input]

    def get_state(self):
        return {"input": self.input.get_state(), "pos": self._pos}

    def delivered(self, state) -> int:
        """How many elements a saved ``state`` says this worker's selection has passed on."""
        return self.node.count_selected_below(int(state["pos"]))

    def set_state(self, state):
        self.input.set_state(state["input"])
        self._pos = int(state["pos"])
