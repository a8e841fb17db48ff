"""``concatenate``: the first input to its end, then the second (built when the first ends)."""

from __future__ import annotations

from .base import Iterator


class ConcatenateIterator(Iterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self._which = 0
        self.input = ctx.build(node.inputs[0])
        self.index_source = None

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
                return out

    def _next(self):
        while True:
            try:
                return self.input.next()
            except StopIteration:
                if not self._switch():
                    raise

    def children(self):
        return [self.input]

    def get_state(self):
        return {"which": self._which, "input": self.input.get_state()}

    def set_state(self, state):
        if int(state["which"]) == 1 and self._which == 0:
            self._switch()
        self.input.set_state(state["input"])
