"""``shard``: keep every n-th element starting at ``index``; passes index streams through."""

from __future__ import annotations

import numpy as np

from ..errors import FailedPreconditionError, InvalidArgumentError
from .base import Iterator
from ..engine.registry import builds
from ..nodes.shard import Shard

BLOCK = 4096


@builds(Shard)
class ShardIterator(Iterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        if node.is_hint:
            raise FailedPreconditionError(
                "shard(SHARD_HINT, SHARD_HINT) is a placeholder for auto-sharding with the HINT policy; it "
                "cannot be iterated outside a distribution strategy.", node.label())
        self.input = ctx.build(node.inputs[0])
        self.index_source = self.input.index_source
        self._n, self._i = node.num_shards, node.index
        self._pos = 0  # input elements consumed so far
        self._checked = not node.require_non_empty

    def _check_non_empty(self):
        """Auto-sharding's rule: before its first element, a worker checks that the input has at least
        num_shards elements (else some worker would get nothing)."""
        self._checked = True
        n = self.node.inputs[0].cardinality()
        if n >= 0 and n < self._n and self._i < n:
            raise InvalidArgumentError(
                f"Could not apply FILE based sharding: the dataset only has {n} file(s), which is not enough "
                f"for the required {self._n} shards/workers. If you are using datasets with distribution "
                "strategy, consider setting the auto sharding policy to either DATA or OFF using the "
                "`experimental_distribute.auto_shard_policy` option of `Options()`. Or, split your input files "
                "into a larger number of small files such that number of files is greater than number of "
                "shards/workers.", self.node.label())

    def _next(self):
        if not self._checked:
            self._check_non_empty()
        n, i = self._n, self._i
        while True:
            element = self.input.next()
            pos = self._pos
            self._pos = pos + 1
            if pos % n == i:
                return element

    def _next_many(self, k):
        if self.index_source is not None:
            return super()._next_many(k)
        if not self._checked:
            self._check_non_empty()
        n, i = self._n, self._i
        while True:
            first = (i - self._pos) % n  # offset of the next kept position within the block
            # never read past the k-th kept element: the input is consumed as element by element
            block = self.input.next_many(min(first + (k - 1) * n + 1, BLOCK * n))
            if not block:
                return []
            self._pos += len(block)
            kept = block[first::n]
            if kept:
                return kept

    def next_indices(self, k):
        if not self._checked:
            self._check_non_empty()
        n, i = self._n, self._i
        parts, got = [], 0
        while got < k:
            # enough input positions to produce the k - got indices still wanted
            first = (i - self._pos) % n  # offset of the next kept position within the block
            want = first + (k - got - 1) * n + 1
            block = self.input.next_indices(min(max(want, 1), BLOCK * n))
            if len(block) == 0:
                break
            offsets = np.arange(self._pos, self._pos + len(block))
            kept = block[offsets % n == i]
            self._pos += len(block)
            parts.append(kept)
            got += len(kept)
        return np.concatenate(parts) if parts else np.empty(0, np.int64)

    def children(self):
        return [self.input]

    def get_state(self):
        return {"input": self.input.get_state(), "pos": self._pos, "checked": self._checked}

    def delivered(self, state) -> int:
        """How many elements a saved ``state`` of this shard says it has passed on: its index's positions
        among the input positions it read (elastic resume counts a worker's progress from it)."""
        return max(0, -(-(int(state["pos"]) - self.node.index) // self.node.num_shards))

    def set_state(self, state):
        self.input.set_state(state["input"])
        self._pos = int(state["pos"])
        self._checked = bool(state["checked"])
