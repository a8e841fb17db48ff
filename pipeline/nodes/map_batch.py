"""``map(f).batch(b)`` as one stage (made by the map_batch_fusion and vectorized_map passes, never by users).

The fused stage pulls ``b`` elements, maps them in one block loop and writes the results straight into the
batch's arrays (``iterators/map_batch.py``); with ``vectorized`` ``f`` runs once on the whole batch.
"""

from __future__ import annotations

from .base import Node, ShardWalk


class MapAndBatch(Node):
    """``batch_node(map_node(input))`` as one stage; ``vectorized``: ``f`` runs once on the whole batch,
    declared so by the user or, with ``proven``, proven elementwise by ``passes/elementwise_proof.py``."""

    kind = "MapAndBatch"
    shard_walk = ShardWalk.THROUGH

    def __init__(self, map_node, batch_node, vectorized=False, proven=False):
        super().__init__(map_node.inputs)
        self.map_node, self.batch_node, self.vectorized = map_node, batch_node, vectorized
        self.proven = proven
        self.name = batch_node.name or map_node.name
        self.is_random = map_node.is_random
        self.seeds = map_node.seeds

    @property
    def lazy_spec(self):
        return True

    def params(self):
        p = {"map_func": self.map_node.map_func, "batch_size": self.batch_node.batch_size,
             "drop_remainder": self.batch_node.drop_remainder,
             "num_parallel_calls": self.map_node.num_parallel_calls}
        if self.vectorized:
            p["vectorized"] = True
        return p

    def functions(self):
        return {"map_func": self.map_node.map_func}

    def compute_spec(self):
        return self.batch_node.element_spec

    def cardinality(self):
        return self.batch_node.cardinality()

    def batches_of(self):
        return int(self.batch_node.batch_size)
