"""``prefetch``: a background thread keeps up to ``buffer_size`` elements ready."""

from __future__ import annotations

from ..errors import InvalidArgumentError
from .base import ShardWalk
from .common import AUTOTUNE, PassThrough, check_int


class Prefetch(PassThrough):
    kind = "Prefetch"
    shard_walk = ShardWalk.THROUGH
    output_stage = True
    keeps_batch_dim = True

    def __init__(self, input_node, buffer_size):
        super().__init__((input_node,))
        buffer_size = check_int(buffer_size, "buffer_size", "prefetch")
        if buffer_size < AUTOTUNE:
            raise InvalidArgumentError(f"prefetch: buffer_size must be >= 0 or set buffer_size to be -1 for "
                                       f"auto-tuning, got {buffer_size}.", "Prefetch")
        self.buffer_size = buffer_size

    def params(self):
        return {"buffer_size": "AUTOTUNE" if self.buffer_size == AUTOTUNE else self.buffer_size}

    def cardinality(self):
        return self.inputs[0].cardinality()

    def runs_ahead(self):
        return self.buffer_size != 0
