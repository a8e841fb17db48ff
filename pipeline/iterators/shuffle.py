"""``shuffle``: the buffer algorithm, over elements or -- for random-access inputs -- over indices.

The buffer fills with the first ``buffer_size`` inputs; each output takes a uniformly random slot and
refills it with the next input; at the end the rest drains at random. Output k therefore always comes from
an input index below k + buffer_size. Over an index stream the buffer holds integers, so a shuffled
``batch`` is still one vectorised gather and the saved state holds no elements.

Random slots come from uniform doubles drawn 1024 at a time from a PCG64 generator keyed on (seeds,
iteration); the state stores the generator as it was before the current draw and how many were used,
so a restored iterator continues with exactly the same choices.
"""

from __future__ import annotations

import numpy as np

from .. import random_seed
from .base import Iterator

DRAW = 1024
FILL_BLOCK = 4096


class ShuffleIterator(Iterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        self.index_source = self.input.index_source
        self._indices = self.index_source is not None
        self._capacity = node.buffer_size if node.buffer_size > 0 else None  # None: everything
        seeds = node.seeds
        if seeds is None:  # unseeded: fresh per iterator tree, shared by its epochs
            seeds = ctx.fresh_seeds(node)
        self._seeds = tuple(seeds)
        keys = ctx.iteration if node.reshuffle_each_iteration else ()
        self._rng = random_seed.generator(self._seeds, *keys)
        self._draw_from = random_seed.generator_state(self._rng)
        self._u = self._rng.random(DRAW).tolist()
        self._used = 0
        self._buffer: list = []
        self._incoming: list = []  # fetched from the input, not yet in the buffer
        self._input_done = False
        self._filled = False

    # ------------------------------------------------------------------ input
    def _pull(self, n):
        if self._indices:
            return self.input.next_indices(n).tolist()
        return self.input.next_many(n)

    def _next_input(self):
        """The next input item, or a sentinel at the end."""
        if not self._incoming:
            if self._input_done:
                return _END
            self._incoming = self._pull(FILL_BLOCK)
            self._incoming.reverse()  # pop() from the end is O(1)
            if not self._incoming:
                self._input_done = True
                return _END
        return self._incoming.pop()

    def _fill(self):
        self._filled = True
        cap = self._capacity
        while cap is None or len(self._buffer) < cap:
            want = FILL_BLOCK if cap is None else min(FILL_BLOCK, cap - len(self._buffer))
            items = self._pull(want)
            if not items:
                self._input_done = True
                break
            self._buffer.extend(items)

    # ------------------------------------------------------------------ output
    def _take(self, n) -> list:
        if not self._filled:
            self._fill()
        buf, out = self._buffer, []
        while len(out) < n and buf:
            if self._used == DRAW:
                self._draw_from = random_seed.generator_state(self._rng)
                self._u = self._rng.random(DRAW).tolist()
                self._used = 0
            j = int(self._u[self._used] * len(buf))
            self._used += 1
            out.append(buf[j])
            item = self._next_input()
            if item is _END:
                buf[j] = buf[-1]
                buf.pop()
            else:
                buf[j] = item
        return out

    def _next(self):
        out = self._take(1)
        if not out:
            raise StopIteration
        if self._indices:
            return self.index_source.element_at(out[0])
        return out[0]

    def _next_many(self, n):
        if self._indices:
            return super()._next_many(n)
        return self._take(n)

    def next_indices(self, n):
        return np.asarray(self._take(n), dtype=np.int64)

    def children(self):
        return [self.input]

    # ------------------------------------------------------------------ state
    def get_state(self):
        return {"input": self.input.get_state(), "seeds": list(self._seeds), "draw_from": self._draw_from,
                "used": self._used, "buffer": list(self._buffer), "incoming": list(self._incoming),
                "input_done": self._input_done, "filled": self._filled}

    def set_state(self, state):
        self.input.set_state(state["input"])
        self._seeds = tuple(state["seeds"])
        self._draw_from = state["draw_from"]
        self._rng = random_seed.restore_generator(self._draw_from)
        self._u = self._rng.random(DRAW).tolist()
        self._used = int(state["used"])
        self._buffer = list(state["buffer"])
        self._incoming = list(state["incoming"])
        self._input_done = bool(state["input_done"])
        self._filled = bool(state["filled"])


_END = object()
