"""``ElasticSelect``: one worker's share of what an elastic global state says remains (``checkpoint/elastic.py``).

The remaining positions of the global dataset are ``holes + [frontier, frontier + 1, ...]``; worker
``index`` of ``num_workers`` takes ``remaining[index::num_workers]``. ``shard(W, i)`` is the case
``holes=[]``, ``frontier=0`` (a fresh elastic job uses this node for it: noop elimination never removes it).
"""

from __future__ import annotations

import numpy as np

from ..errors import InvalidArgumentError
from .common import PassThrough


class ElasticSelect(PassThrough):
    """The elements of its input at positions ``remaining[index::num_workers]`` where
    ``remaining = holes + [frontier, frontier + 1, ...]`` (``shard`` is the case holes=[], frontier=0)."""

    kind = "ElasticSelect"
    keeps_batch_dim = True

    def __init__(self, input_node, holes, frontier: int, num_workers: int, index: int):
        super().__init__((input_node,))
        self.holes = np.asarray(sorted(int(h) for h in holes), dtype=np.int64)
        self.frontier = int(frontier)
        self.num_workers = int(num_workers)
        self.index = int(index)
        if self.num_workers <= 0 or not 0 <= self.index < self.num_workers:
            raise InvalidArgumentError(f"elastic: worker index {index} is not in [0, {num_workers}).", self.kind)
        if len(self.holes) and self.holes[-1] >= self.frontier:
            raise InvalidArgumentError("elastic: holes must lie below the frontier.", self.kind)
        # this worker's own holes, and where its share of the tail starts
        self.my_holes = self.holes[self.index::self.num_workers]
        self.tail_offset = (self.index - len(self.holes)) % self.num_workers

    def params(self):
        return {"holes": self.holes, "frontier": self.frontier, "num_workers": self.num_workers,
                "index": self.index}

    def cardinality(self):
        n = self.inputs[0].cardinality()
        if n < 0:  # INFINITE stays infinite (the tail is unbounded); UNKNOWN stays unknown
            return n
        return self.count_selected_below(n)

    def count_selected_below(self, pos: int) -> int:
        """How many of this worker's positions lie below ``pos``."""
        holes = int(np.searchsorted(self.my_holes, pos))
        first_tail = self.frontier + self.tail_offset
        tail = 0 if pos <= first_tail else -(-(pos - first_tail) // self.num_workers)
        return holes + tail

    def nth_position(self, k: int) -> int:
        """The position of this worker's k-th element (0-based)."""
        if k < len(self.my_holes):
            return int(self.my_holes[k])
        return self.frontier + self.tail_offset + (k - len(self.my_holes)) * self.num_workers

    def selected(self, positions: np.ndarray) -> np.ndarray:
        tail = positions - (self.frontier + self.tail_offset)
        mask = (tail >= 0) & (tail % self.num_workers == 0)
        if len(self.my_holes):
            mask |= np.isin(positions, self.my_holes)
        return mask
