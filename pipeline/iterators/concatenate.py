"""``concatenate``: the first input to its end, then the second (built when the first ends)."""

from __future__ import annotations

from .. import structure
from .base import Iterator


class ConcatenateIterator(Iterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self._which = 0
        self.input = ctx.build(node.inputs[0])
        self.index_source = None
        # dicts come out in the spec's key order whichever input made them (tf.data packs by the spec)
        self._order = structure.spec_key_order(node.element_spec)

    def _switch(self) -> bool:
        if self._which == 1:
            return False
        self.input.close()
        self._which = 1
        self.input = self.ctx.build(self.node.inputs[1])
        return True

    def _next_many(self, n):
        while True:
            out = self.input.next_many(n)
            if out or not self._switch():
                order = self._order
                return out if order is None else [order(e) for e in out]

    def _next(self):
        while True:
            try:
                e = self.input.next()
            except StopIteration:
                if not self._switch():
                    raise
                continue
            return e if self._order is None else self._order(e)

    def children(self):
        return [self.input]

    def get_state(self):
        return {"which": self._which, "input": self.input.get_state()}

    def set_state(self, state):
        if int(state["which"]) == 1 and self._which == 0:
            self._switch()
        self.input.set_state(state["input"])
