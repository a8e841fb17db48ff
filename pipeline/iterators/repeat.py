"""``repeat``: a fresh input iterator per epoch, keyed with the epoch number; stops when an epoch is empty."""

from __future__ import annotations

import numpy as np

from .base import Iterator
from ..engine.registry import builds
from ..nodes.repeat import Repeat


@builds(Repeat)
class RepeatIterator(Iterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self._count = node.count  # -1: forever
        self._epoch = 0
        self._got_any = False  # did the current epoch yield anything (an empty input must not spin)
        self.input = self._open(0) if self._count != 0 else None
        self.index_source = self.input.index_source if self.input is not None else None

    def _open(self, epoch):
        return self.ctx.child(iteration=self.ctx.iteration + (epoch,)).build(self.node.inputs[0])

    def _advance(self) -> bool:
        """Move to the next epoch; False when there is none."""
        if self.input is None:
            return False
        self.input.close()
        if not self._got_any or (self._count > 0 and self._epoch + 1 >= self._count):
            self.input = None
            return False
        self._epoch += 1
        self._got_any = False
        self.input = self._open(self._epoch)
        return True

    def _next(self):
        while self.input is not None:
            try:
                element = self.input.next()
            except StopIteration:
                self._advance()
                continue
            self._got_any = True
            return element
        raise StopIteration

    def _next_many(self, n):
        while self.input is not None:
            out = self.input.next_many(n)
            if out:
                self._got_any = True
                return out
            self._advance()
        return []

    def next_indices(self, n):
        while self.input is not None:
            out = self.input.next_indices(n)
            if len(out):
                self._got_any = True
                return out
            self._advance()
        return np.empty(0, np.int64)

    def children(self):
        return [self.input]

    def get_state(self):
        return {"epoch": self._epoch, "got_any": self._got_any,
                "input": None if self.input is None else self.input.get_state()}

    def set_state(self, state):
        if self.input is not None:
            self.input.close()
        self._epoch = int(state["epoch"])
        self._got_any = bool(state["got_any"])
        if state["input"] is None:
            self.input = None
        else:
            self.input = self._open(self._epoch)
            self.input.set_state(state["input"])
