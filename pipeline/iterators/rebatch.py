"""``rebatch``: input batches go into a ``RowQueue``; each output batch is sliced (and, across input
batches, concatenated) from it -- never split into single elements."""

from __future__ import annotations

from .base import Iterator
from ..engine.rows import RowQueue
from ..engine.blocks import restored_error, saved_error
from ..engine.registry import builds
from ..nodes.rebatch import Rebatch


@builds(Rebatch)
class RebatchIterator(Iterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        self._sizes = node.sizes
        self._drop = node.drop_remainder
        self._queue = RowQueue(node.label())
        self._turn = 0  # index into sizes of the next batch
        self._input_done = False
        self._done = False

    def _fill(self, rows: int) -> None:
        queue = self._queue
        while queue.rows < rows and not self._input_done:
            try:
                queue.push(self.input.next())
            except StopIteration:
                self._input_done = True

    def _next(self):
        if self._done:
            raise StopIteration
        size = self._sizes[self._turn]
        self._fill(max(size, 1))  # a 0-size batch is only due while rows remain
        queue = self._queue
        if not queue.rows or (queue.rows < size and self._drop):
            self._done = True
            raise StopIteration
        self._turn = (self._turn + 1) % len(self._sizes)
        return queue.take_batch(min(size, queue.rows))

    def children(self):
        return [self.input]

    def get_state(self):
        return {"input": self.input.get_state(), "rows": self._queue.get_state(), "turn": self._turn,
                "input_done": self._input_done, "done": self._done, "deferred": saved_error(self._deferred)}

    def set_state(self, state):
        self.input.set_state(state["input"])
        self._queue.set_state(state["rows"])
        self._turn = int(state["turn"])
        self._input_done = bool(state["input_done"])
        self._done = bool(state["done"])
        self._deferred = restored_error(state.get("deferred"), "'deferred'")  # (absent from older states)
