"""``unique``: a set of the elements seen so far; blocks are filtered against it in one loop."""

from __future__ import annotations

import numpy as np

from .. import structure
from .base import BlockIterator
from ..engine.registry import builds
from ..nodes.unique import Unique

BLOCK = 256


@builds(Unique)
class UniqueIterator(BlockIterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        self._dtype = node.inputs[0].element_spec.dtype
        self._strings = self._dtype == structure.STRING
        self._seen: set = set()

    def _keys(self, block: list) -> list:
        """Hashable keys of a block, in one conversion for scalars: Python ints, or the bytes themselves;
        a tensor's key is its shape and contents (a tuple, so the state keeps it as a nest of lists)."""
        if self._strings:
            if all(isinstance(x, bytes) for x in block):
                return block
            return [x if isinstance(x, bytes) else (tuple(np.shape(x)),) + tuple(
                v if isinstance(v, bytes) else bytes(v) for v in np.asarray(x, dtype=object).reshape(-1).tolist())
                for x in block]
        try:
            keys = np.asarray(block)
        except ValueError:  # tensors of different shapes
            keys = None
        if keys is not None and keys.ndim == 1 and keys.dtype != object:
            return keys.tolist()
        return [int(x) if np.ndim(x) == 0 else (tuple(np.shape(x)),) + tuple(np.asarray(x).reshape(-1).tolist())
                for x in block]

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
        scalars = [k for k in self._seen if not isinstance(k, tuple)]
        tensors = [[list(k[0]), list(k[1:])] for k in self._seen if isinstance(k, tuple)]
        state = {"input": self.input.get_state(),
                 "seen": sorted(scalars) if self._strings else np.asarray(sorted(scalars), dtype=self._dtype)}
        if tensors:  # non-scalar elements: [shape, flat values] each
            state["seen_tensors"] = sorted(tensors)
        return state

    def set_state(self, state):
        self.input.set_state(state["input"])
        seen = state["seen"]
        self._seen = set(seen) if self._strings else set(np.asarray(seen).tolist())
        for shape, values in state.get("seen_tensors", []):
            self._seen.add((tuple(int(d) for d in shape),) + tuple(
                bytes(v) if self._strings else int(v) for v in values))
