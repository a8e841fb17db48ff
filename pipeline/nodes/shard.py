"""``shard(num_shards, index)``: the elements at positions p with p % num_shards == index."""

from __future__ import annotations

from ..errors import InvalidArgumentError
from .base import INFINITE, ShardWalk, UNKNOWN
from .common import SHARD_HINT, PassThrough, check_int


class Shard(PassThrough):
    kind = "Shard"
    shard_walk = ShardWalk.THROUGH
    keeps_batch_dim = True

    def __init__(self, input_node, num_shards, index, require_non_empty=False):
        super().__init__((input_node,))
        self.num_shards = check_int(num_shards, "num_shards", "shard")
        self.index = check_int(index, "index", "shard")
        self.is_hint = self.num_shards == SHARD_HINT
        if not self.is_hint:
            if self.num_shards <= 0:
                raise InvalidArgumentError(f"shard: Number of shards must be greater than zero (currently "
                                           f"num_shards = {self.num_shards}).", "Shard")
            if not 0 <= self.index < self.num_shards:
                raise InvalidArgumentError(f"shard: Index must be between 0 and {self.num_shards - 1} "
                                           f"(currently index = {self.index}).", "Shard")
        # Set by auto-shard: a worker whose share would be smaller than it should be raises (tf.data's rule).
        self.require_non_empty = bool(require_non_empty)

    def params(self):
        p = {"num_shards": self.num_shards, "index": self.index}
        if self.require_non_empty:
            p["require_non_empty"] = True
        return p

    def cardinality(self):
        if self.is_hint:
            return UNKNOWN
        n = self.inputs[0].cardinality()
        if n in (INFINITE, UNKNOWN):
            return n
        return max(0, -(-(n - self.index) // self.num_shards))
