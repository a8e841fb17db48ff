"""``shuffle``: tf.data's buffer shuffle, seeded by TensorFlow's two-level scheme (see random_seed.py)."""

from __future__ import annotations

from .. import graph, random_seed
from ..errors import InvalidArgumentError
from .base import ShardWalk, UNKNOWN
from .common import PassThrough, check_int


class Shuffle(PassThrough):
    kind = "Shuffle"
    shard_walk = ShardWalk.THROUGH
    only_reorders = True
    keeps_batch_dim = True
    is_random = True

    def __init__(self, input_node, buffer_size, seed=None, reshuffle_each_iteration=None):
        super().__init__((input_node,))
        if buffer_size is None:
            raise ValueError("shuffle: `buffer_size` must not be None.")
        buffer_size = check_int(buffer_size, "buffer_size", "shuffle")
        if buffer_size <= 0 and buffer_size != UNKNOWN:
            raise InvalidArgumentError(f"shuffle: buffer_size must be greater than zero or UNKNOWN_CARDINALITY, "
                                       f"got {buffer_size}.", "Shuffle")
        self.buffer_size = buffer_size  # UNKNOWN (-2): the whole dataset
        self.seed = seed
        self.reshuffle_each_iteration = True if reshuffle_each_iteration is None else bool(reshuffle_each_iteration)
        self.seeds = random_seed.resolve(seed, f"Shuffle:{buffer_size}:{graph.fingerprint(input_node)}")

    def params(self):
        return {"buffer_size": self.buffer_size, "seed": self.seed,
                "reshuffle_each_iteration": self.reshuffle_each_iteration}

    def cardinality(self):
        return self.inputs[0].cardinality()
