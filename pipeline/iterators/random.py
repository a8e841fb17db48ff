"""``Dataset.random``'s iterator: counter-based values, a block per call; state is (seeds, position)."""

from __future__ import annotations

import numpy as np

from .. import random_seed
from .base import BlockIterator
from ..engine.registry import builds
from ..nodes.random import Random

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def splitmix64(counters: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser over uint64 counters (wrapping arithmetic, as in the reference C)."""
    z = counters * _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


@builds(Random)
class RandomIterator(BlockIterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        seeds = node.seeds if node.seeds is not None else ctx.fresh_seeds(node)
        keys = ctx.iteration if node.rerandomize_each_iteration else ()
        # one 64-bit key for this stream, from the seeds and the epoch key
        self._key = int(random_seed.generator(tuple(seeds), *keys).integers(0, 2**64, dtype=np.uint64))
        self._pos = 0

    def _next_many(self, n):
        with np.errstate(over="ignore"):
            counters = np.arange(self._pos, self._pos + n, dtype=np.uint64) + np.uint64(self._key)
            values = splitmix64(counters).view(np.int64)
        self._pos += n
        return list(values)

    def get_state(self):
        return {"key": self._key, "pos": self._pos}

    def set_state(self, state):
        self._key, self._pos = int(state["key"]), int(state["pos"])
