"""``unbatch``: rows of each input batch, handed out in runs of views (no per-row copies)."""

from __future__ import annotations

from .base import Iterator
from .rows import RowQueue


class UnbatchIterator(Iterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        self._queue = RowQueue(node.label())
        self._input_done = False

    def _next_many(self, n):
        queue = self._queue
        while not queue.rows:
            if self._input_done:
                return []
            try:
                queue.push(self.input.next())
            except StopIteration:
                self._input_done = True
        return queue.take_rows(n)

    def _next(self):
        rows = self._next_many(1)
        if not rows:
            raise StopIteration
        return rows[0]

    def children(self):
        return [self.input]

    def get_state(self):
        return {"input": self.input.get_state(), "rows": self._queue.get_state(), "input_done": self._input_done}

    def set_state(self, state):
        self.input.set_state(state["input"])
        self._queue.set_state(state["rows"])
        self._input_done = bool(state["input_done"])
