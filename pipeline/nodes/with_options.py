"""``with_options``: attaches Options; the options pass merges them and drops this node before running."""

from __future__ import annotations

from ..options import Options
from .base import ShardWalk
from .common import PassThrough


class WithOptions(PassThrough):
    kind = "WithOptions"
    shard_walk = ShardWalk.THROUGH
    output_stage = True
    keeps_batch_dim = True

    def __init__(self, input_node, options: Options):
        super().__init__((input_node,))
        if not isinstance(options, Options):
            raise TypeError(f"with_options: expected an Options, got {type(options).__name__}")
        self.attached_options = options

    def params(self):
        return {"options": self.attached_options}

    def cardinality(self):
        return self.inputs[0].cardinality()
