"""``zip`` over inputs that are not all random-access: blocks from every input, paired position by position.

Each input keeps a queue of elements read but not yet paired. An input error takes its position: the
zip raises there (the other inputs' elements at that position are dropped, as tf.data consumes them) and
goes on with the next position, after the elements before it have been delivered.
"""

from __future__ import annotations

from .. import structure
from .base import BlockIterator
from ..engine.blocks import Failure

BLOCK = 256


class ZipIterator(BlockIterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.inputs = [ctx.build(i) for i in node.inputs]
        self._queues: list[list] = [[] for _ in self.inputs]  # read, not yet paired (elements, Failures)
        self._done = False
        self._failures = 0  # Failures in the queues
        template = node.template
        if type(template) is tuple and not any(structure.is_nested(x) for x in template):
            self._pack = tuple  # zip((a, b, ...)): rows of zip() are the elements already
        elif not structure.is_nested(template):
            self._pack = lambda row: row[0]
        else:
            self._pack = node.pack

    def _fill(self, queue: list, it, n: int) -> None:
        """Read until ``queue`` holds ``n`` items, an error, or the input's end."""
        while len(queue) < n:
            try:
                got = it.next_many(n - len(queue))
            except Exception as e:  # noqa: BLE001 - takes its position in the zip
                queue.append(Failure(e))
                self._failures += 1
                return
            if not got:
                return
            queue.extend(got)

    def _next_many(self, n):
        if self._done:
            return []
        n = min(n, BLOCK)
        for queue, it in zip(self._queues, self.inputs):
            self._fill(queue, it, n)
        k = min(n, min(len(q) for q in self._queues))
        if k == 0:  # the shortest input has ended
            self._done = True
            return []
        rows = [q[:k] for q in self._queues]
        if self._failures:
            first = min((r.index(x) for r in rows for x in r if type(x) is Failure), default=k)
            if first == 0:
                for q in self._queues:
                    del q[:1]
                self._failures -= sum(type(r[0]) is Failure for r in rows)
                raise next(r[0] for r in rows if type(r[0]) is Failure).error
            k = first  # deliver the rows before it; the failure comes next
            rows = [r[:k] for r in rows]
        for q in self._queues:
            del q[:k]
        pack = self._pack
        if pack is tuple:
            return list(zip(*rows))
        return [pack(row) for row in zip(*rows)]

    def children(self):
        return list(self.inputs)

    def get_state(self):
        return {"inputs": [it.get_state() for it in self.inputs], "queues": [list(q) for q in self._queues],
                "done": self._done}

    def set_state(self, state):
        for it, saved in zip(self.inputs, state["inputs"]):
            it.set_state(saved)
        self._queues = [list(q) for q in state["queues"]]
        self._failures = sum(type(x) is Failure for q in self._queues for x in q)
        self._done = bool(state["done"])
