"""``unique``: a set of the elements seen so far; blocks are filtered against it in one loop."""

from __future__ import annotations

import numpy as np

from .. import structure
from .base import Iterator

BLOCK = 256


class UniqueIterator(Iterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        self._dtype = node.inputs[0].element_spec.dtype
        self._strings = self._dtype == structure.STRING
        self._seen: set = set()

    def _key(self, element):
        if self._strings:
            return element if isinstance(element, bytes) else bytes(element)
        if np.ndim(element) != 0:
            raise TypeError(f"{self.node.label()}: elements must be scalars, got shape {np.shape(element)}.")
        return int(element)

    def _next_many(self, n):
        seen, key = self._seen, self._key
        while True:
            block = self.input.next_many(min(n, BLOCK))
            if not block:
                return []
            out = []
            for element in block:
                k = key(element)
                if k not in seen:
                    seen.add(k)
                    out.append(element)
            if out:
                return out

    def _next(self):
        out = self._next_many(1)
        if not out:
            raise StopIteration
        return out[0]

    def children(self):
        return [self.input]

    def get_state(self):
        seen = sorted(self._seen)
        return {"input": self.input.get_state(),
                "seen": seen if self._strings else np.asarray(seen, dtype=self._dtype)}

    def set_state(self, state):
        self.input.set_state(state["input"])
        self._seen = set(state["seen"]) if self._strings else set(np.asarray(state["seen"]).tolist())
