"""``take`` and ``skip``: a count of elements from the front; negative counts mean "all"."""

from __future__ import annotations

from .base import INFINITE, ShardWalk, UNKNOWN
from .common import PassThrough, check_int


class Take(PassThrough):
    kind = "Take"
    shard_walk = ShardWalk.THROUGH
    keeps_batch_dim = True

    def __init__(self, input_node, count):
        super().__init__((input_node,))
        self.count = check_int(count, "count", "take")

    def params(self):
        return {"count": self.count}

    def cardinality(self):
        n = self.inputs[0].cardinality()
        if self.count < 0:  # any negative count means all (tf.data reports -5 for take(-5); we don't)
            return n
        if n == INFINITE:
            return self.count
        if n == UNKNOWN:
            return UNKNOWN
        return min(n, self.count)


class Skip(PassThrough):
    kind = "Skip"
    shard_walk = ShardWalk.THROUGH
    keeps_batch_dim = True

    def __init__(self, input_node, count):
        super().__init__((input_node,))
        self.count = check_int(count, "count", "skip")

    def params(self):
        return {"count": self.count}

    def cardinality(self):
        n = self.inputs[0].cardinality()
        if n == INFINITE:
            return INFINITE
        if self.count < 0:
            return 0
        if n == UNKNOWN:
            return UNKNOWN
        return max(n - self.count, 0)
