"""``unbatch``: rows of each input batch, handed out in runs of views (no per-row copies).

Single ``next`` calls are served from a run of rows sliced ahead (``_ready``, reversed so ``pop`` is the
next row); the state carries those rows, so nothing is read twice or lost.
"""

from __future__ import annotations

from .base import Iterator
from ..engine.rows import RowQueue
from ..engine.registry import builds
from ..nodes.unbatch import Unbatch

RUN = 64  # rows sliced at once for single next() calls


@builds(Unbatch)
class UnbatchIterator(Iterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        self._queue = RowQueue(node.label())
        self._ready: list = []
        self._input_done = False

    def _next_many(self, n):
        ready = self._ready
        if ready:
            out = ready[:-n - 1:-1]
            del ready[-n:]
            return out
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
        if not self._ready:
            run = self._next_many(RUN)
            if not run:
                raise StopIteration
            run.reverse()
            self._ready = run
        return self._ready.pop()

    def children(self):
        return [self.input]

    def get_state(self):
        return {"input": self.input.get_state(), "rows": self._queue.get_state(), "ready": self._ready[::-1],
                "input_done": self._input_done}

    def set_state(self, state):
        self.input.set_state(state["input"])
        self._queue.set_state(state["rows"])
        self._ready = list(state["ready"])[::-1]
        self._input_done = bool(state["input_done"])
