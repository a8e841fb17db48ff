"""Sequential ``map``: the function runs on the consumer's thread, a block at a time."""

from __future__ import annotations

from .. import random_seed
from .base import Iterator, count_held
from ..engine.blocks import Delivery, apply_block

BLOCK = 256  # elements pulled from the input per call when the consumer asks for many
NEXT_BLOCK = 64  # the most elements read ahead for a consumer calling next() one element at a time


class MapIterator(Iterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        self._label = node.label()
        self._position = 0  # input elements consumed so far: the logical position of the next one
        self._ready = Delivery()
        self._ahead = 1  # the next read-ahead block size for next()
        self._seeds = node_seeds(node)
        self._rng_extra = rng_factory(self._seeds, ctx.iteration)

    def _refill(self, n: int) -> bool:
        block = self.input.next_many(n)
        if not block:
            return False
        unpack = type(block[0]) is tuple
        results, failed = apply_block(self.node.map_func, block, unpack, self._label, self._position,
                                      self._rng_extra)
        self._position += len(block)
        self._ready = Delivery(results, failed)
        return True

    def _next(self):
        if not len(self._ready):
            # Read ahead in growing blocks (1, 2, 4, ... NEXT_BLOCK): the first element comes at once, and
            # a consumer that keeps calling next() stops paying a whole block's machinery per element.
            if not self._refill(self._ahead):
                raise StopIteration
            self._ahead = min(NEXT_BLOCK, 2 * self._ahead)
        return self._ready.take(1)[0]

    def _next_many(self, n):
        if not len(self._ready) and not self._refill(min(n, BLOCK) if n > 1 else 1):
            return []
        return self._ready.take(n)

    def children(self):
        return [self.input]

    def get_state(self):
        return {"input": self.input.get_state(), "position": self._position,
                "ready": self._ready.remaining(), "seeds": self._seeds}

    @staticmethod
    def held(state, weight=None):
        """Results made and not yet delivered, one per input element (``Iterator.held``)."""
        return count_held(state["ready"], weight)

    def set_state(self, state):
        self.input.set_state(state["input"])
        self._position = int(state["position"])
        self._ready = Delivery.of(state["ready"])
        self._seeds = None if state["seeds"] is None else tuple(state["seeds"])
        self._rng_extra = rng_factory(self._seeds, self.ctx.iteration)


def node_seeds(node):
    """The seeds of a ``map(with_rng=True)``: the node's, or fresh entropy for this iterator's lifetime."""
    if not node.with_rng:
        return None
    return node.seeds if node.seeds is not None else random_seed.fresh()


def rng_factory(seeds, iteration):
    """position -> a generator keyed on (seeds, iteration, position), or None without seeds."""
    if seeds is None:
        return None

    def make(position):
        return random_seed.generator(seeds, *iteration, position)

    return make


class HandedOverByProbe:
    """A parallel map stage that an executor choice (``iterators/chosen_map.py``) may hand its input to:
    while ``waiting_for_probe`` it starts nothing; ``resume_after`` goes on after the probe's elements."""

    waiting_for_probe = False

    def start_ahead(self):
        """Start the workers and submit the first tasks now (their input is read on the thread that creates
        the iterator)."""
        if self._pool is None and not self.waiting_for_probe:
            self._fill()

    def resume_after(self, position: int, ready: list, seeds) -> None:
        """Go on after ``position`` input elements mapped elsewhere -- the executor choice's probe --
        delivering their results, ``ready``, first; and start reading."""
        self._position = position
        self._ready = Delivery.of(ready)
        self._seeds = seeds
        self.waiting_for_probe = False
