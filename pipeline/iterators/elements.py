"""The iterator of an ``Elements`` node: a position in its list."""

from __future__ import annotations

from .base import Iterator
from ..engine.registry import builds
from ..nodes.elements import Elements


@builds(Elements)
class ElementsIterator(Iterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self._elements = node.elements
        self._pos = 0

    def _next(self):
        if self._pos >= len(self._elements):
            raise StopIteration
        self._pos += 1
        return self._elements[self._pos - 1]

    def _next_many(self, n):
        out = self._elements[self._pos:self._pos + n]
        self._pos += len(out)
        return out

    def get_state(self):
        return {"pos": self._pos}

    def set_state(self, state):
        self._pos = int(state["pos"])
