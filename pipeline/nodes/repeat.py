"""``repeat``: the input again and again; each repetition is a new epoch (random stages reshuffle)."""

from __future__ import annotations

from .base import INFINITE, ShardWalk, UNKNOWN
from .common import PassThrough, check_int


class Repeat(PassThrough):
    kind = "Repeat"
    shard_walk = ShardWalk.THROUGH
    keeps_batch_dim = True

    def __init__(self, input_node, count=None):
        super().__init__((input_node,))
        self.count = -1 if count is None else check_int(count, "count", "repeat")
        if self.count < 0:
            self.count = -1  # any negative count means forever

    def params(self):
        return {"count": None if self.count < 0 else self.count}

    def cardinality(self):
        n = self.inputs[0].cardinality()
        if self.count == 0 or n == 0:
            return 0
        if self.count < 0:
            return INFINITE  # as tf.data: even an input of unknown size, repeated forever, is infinite
        if n in (INFINITE, UNKNOWN):
            return n
        return n * self.count
