"""``unique``: a set of the elements seen so far; blocks are filtered against it in one loop."""

from __future__ import annotations

import numpy as np

from .. import structure
from .base import BlockIterator

BLOCK = 256


class UniqueIterator(BlockIterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        self._dtype = node.inputs[0].element_spec.dtype
        self._strings = self._dtype == structure.STRING
        self._seen: set = set()

    def _keys(self, block: list) -> list:
        """Hashable keys of a block, in one conversion: Python ints, or the bytes themselves."""
        if self._strings:
            return [x if isinstance(x, bytes) else bytes(x) for x in block]
        keys = np.asarray(block)
        if keys.ndim != 1:
            raise TypeError(f"{self.node.label()}: elements must be scalars, got shape {keys.shape[1:]}.")
        return keys.tolist()

    def _next_many(self, n):
        seen = self._seen
        while True:
            block = self.input.next_many(min(n, BLOCK))
            if not block:
                return []
            out = []
            for element, key in zip(block, self._keys(block)):
                if key not in seen:
                    seen.add(key)
                    out.append(element)
            if out:
                return out

    def children(self):
        return [self.input]

    def get_state(self):
        seen = sorted(self._seen)
        return {"input": self.input.get_state(),
                "seen": seen if self._strings else np.asarray(seen, dtype=self._dtype)}

    def set_state(self, state):
        self.input.set_state(state["input"])
        self._seen = set(state["seen"]) if self._strings else set(np.asarray(state["seen"]).tolist())
