"""``Dataset.random``: an infinite stream of uniformly random int64 values.

Value ``i`` of an epoch is a pure function of (seeds, epoch key, i) -- a SplitMix64 finaliser over a
counter -- so a block is one vectorised numpy expression and the state is a position. Seeds follow
``random_seed.resolve``; with ``rerandomize_each_iteration`` each epoch of an enclosing ``repeat`` (and
each iteration of the Dataset) draws a different stream, otherwise every epoch repeats the first."""

from __future__ import annotations

import numpy as np

from .. import random_seed
from ..structure import TensorSpec
from .base import INFINITE, Node


class Random(Node):
    kind = "Random"
    is_source = True
    is_random = True

    def __init__(self, seed=None, rerandomize_each_iteration=None):
        super().__init__()
        self.seed = seed
        self.rerandomize_each_iteration = bool(rerandomize_each_iteration)
        self.seeds = random_seed.resolve(seed, f"Random:{self.rerandomize_each_iteration}")

    def params(self):
        return {"seed": self.seed, "rerandomize_each_iteration": self.rerandomize_each_iteration}

    def compute_spec(self):
        return TensorSpec((), np.int64)

    def cardinality(self):
        return INFINITE
