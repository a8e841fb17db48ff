"""``take`` / ``skip`` iterators; both pass index streams through."""

from __future__ import annotations

import numpy as np

from ..errors import InvalidArgumentError
from ..nodes.base import INFINITE
from .base import Iterator
from ..engine.registry import builds
from ..nodes.take import Skip, Take

SKIP_BLOCK = 65536


@builds(Take)
class TakeIterator(Iterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        self.index_source = self.input.index_source
        self._left = node.count if node.count >= 0 else None  # None: no limit

    def _next(self):
        if self._left == 0:
            raise StopIteration
        element = self.input.next()
        if self._left is not None:
            self._left -= 1
        return element

    def _next_many(self, n):
        if self._left is None:
            return self.input.next_many(n)
        if self._left == 0:
            return []
        out = self.input.next_many(min(n, self._left))
        self._left -= len(out)
        return out

    def next_indices(self, n):
        if self._left is None:
            return self.input.next_indices(n)
        if self._left == 0:
            return np.empty(0, np.int64)
        idx = self.input.next_indices(min(n, self._left))
        self._left -= len(idx)
        return idx

    def children(self):
        return [self.input]

    def get_state(self):
        return {"input": self.input.get_state(), "left": self._left}

    def set_state(self, state):
        self.input.set_state(state["input"])
        self._left = state["left"]


@builds(Skip)
class SkipIterator(Iterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        self.index_source = self.input.index_source
        self._to_skip = node.count if node.count >= 0 else None  # None: skip everything
        if self._to_skip is None and node.inputs[0].cardinality() == INFINITE:
            raise InvalidArgumentError("skip: skipping all elements (a negative count) of an infinite dataset "
                                       "would never end.", node.label())

    def _skip(self):
        """Read and drop the elements still to skip (to the end of the input for a negative count)."""
        use_indices = self.index_source is not None
        while self._to_skip != 0:
            k = SKIP_BLOCK if self._to_skip is None else min(self._to_skip, SKIP_BLOCK)
            got = len(self.input.next_indices(k)) if use_indices else len(self.input.next_many(k))
            if got == 0:
                self._to_skip = 0
            elif self._to_skip is not None:
                self._to_skip -= got

    def _next(self):
        if self._to_skip != 0:
            self._skip()
        return self.input.next()

    def _next_many(self, n):
        if self._to_skip != 0:
            self._skip()
        return self.input.next_many(n)

    def next_indices(self, n):
        if self._to_skip != 0:
            self._skip()
        return self.input.next_indices(n)

    def children(self):
        return [self.input]

    def get_state(self):
        return {"input": self.input.get_state(), "to_skip": self._to_skip}

    def set_state(self, state):
        self.input.set_state(state["input"])
        self._to_skip = state["to_skip"]
