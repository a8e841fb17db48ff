"""Distributed values: ``PerReplica`` (one value per replica, a plain ``jax.Array`` underneath) and the enums.

A ``PerReplica`` holds, for every leaf of a nest, one global ``jax.Array`` sharded along axis 0 over the
strategy's replica mesh axis (``NamedSharding(mesh, P('replica'))``):

- *concatenated* (batches from a distributed dataset): global shape ``(N * cap, ...)``; replica i owns rows
  ``[i * cap, (i + 1) * cap)``; when ``sizes`` is set (a ragged step), replica i's true batch is the first
  ``sizes[i]`` of them and the rest is zero padding. A dense step is simply the global batch.
- *stacked* (results of ``run``, values from ``experimental_distribute_values_from_function``): global shape
  ``(N, ...)``; replica i's value is row i.

``.arrays`` gives the underlying nest of ``jax.Array``s for JAX code.
"""

from __future__ import annotations

import enum

import numpy as np


class ReduceOp(enum.Enum):
    SUM = "SUM"
    MEAN = "MEAN"

    @staticmethod
    def parse(op) -> "ReduceOp":
        if isinstance(op, ReduceOp):
            return op
        if isinstance(op, str) and op.upper() in ("SUM", "MEAN"):
            return ReduceOp[op.upper()]
        raise ValueError(f"{op!r} is not a valid ReduceOp (use ReduceOp.SUM, ReduceOp.MEAN, 'SUM' or 'MEAN')")

    @staticmethod
    def from_variable_aggregation(aggregation) -> "ReduceOp":
        aggregation = VariableAggregation(aggregation)
        if aggregation == VariableAggregation.SUM:
            return ReduceOp.SUM
        if aggregation == VariableAggregation.MEAN:
            return ReduceOp.MEAN
        raise ValueError(f"Could not convert from VariableAggregation {aggregation} to ReduceOp")


class VariableAggregation(enum.Enum):
    NONE = 0
    SUM = 1
    MEAN = 2
    ONLY_FIRST_REPLICA = 3


class VariableSynchronization(enum.Enum):
    AUTO = 0
    NONE = 1
    ON_WRITE = 2
    ON_READ = 3


class DistributedValues:
    """Base class of values with one component per replica."""


class PerReplica(DistributedValues):
    """One value per replica; see the module docstring for the layout."""

    def __init__(self, treedef, leaves, strategy, stacked: bool, sizes=None, cap=None):
        self._treedef = treedef
        self._leaves = list(leaves)
        self._strategy = strategy
        self.stacked = stacked
        self.sizes = None if sizes is None else np.asarray(sizes, dtype=np.int64)
        self.cap = cap

    # ------------------------------------------------------------------ views
    @property
    def arrays(self):
        """The nest of global ``jax.Array``s (sharded over the replica axis)."""
        return self._treedef.unflatten(self._leaves)

    @property
    def num_replicas(self) -> int:
        return self._strategy.num_replicas_in_sync

    def _replica_block(self, leaf, shard_data, replica: int):
        if self.stacked:
            block = shard_data[0]
            if self.sizes is not None and block.ndim and block.shape[0] == self.cap:
                block = block[: int(self.sizes[replica])]
            return block
        if self.sizes is not None:
            return shard_data[: int(self.sizes[replica])]
        return shard_data

    def local_values(self) -> tuple:
        """This process's replicas' values, in replica order (the tf.distribute ``.values``)."""
        ids = self._strategy._local_replica_ids
        if self._leaves and isinstance(self._leaves[0], np.ndarray):  # host batches (fetch_to_device=False)
            n = self.num_replicas
            out = []
            for r in ids:
                leaves = []
                for arr in self._leaves:
                    per = arr.shape[0] // n
                    v = arr[r * per:(r + 1) * per]
                    leaves.append(v[: int(self.sizes[r])] if self.sizes is not None else v)
                out.append(self._treedef.unflatten(leaves))
            return tuple(out)
        per_leaf = []
        for leaf in self._leaves:
            blocks = {}
            for shard in leaf.addressable_shards:
                rid = self._strategy._replica_of_device(shard.device)
                if rid not in blocks:
                    blocks[rid] = self._replica_block(leaf, shard.data, rid)
            per_leaf.append([blocks[r] for r in ids])
        return tuple(self._treedef.unflatten([col[i] for col in per_leaf]) for i in range(len(ids)))

    values = property(local_values)

    def host_values(self) -> list:
        """Every replica's value (all processes), as numpy nests, in replica order. A collective when
        several processes take part: every process must call it."""
        full = self._strategy._gather_to_host(self._leaves)
        n = self.num_replicas
        out = []
        for r in range(n):
            leaves = []
            for arr in full:
                if self.stacked:
                    v = arr[r]
                    if self.sizes is not None and v.ndim and v.shape[0] == self.cap:
                        v = v[: int(self.sizes[r])]
                else:
                    per = arr.shape[0] // n
                    v = arr[r * per:(r + 1) * per]
                    if self.sizes is not None:
                        v = v[: int(self.sizes[r])]
                leaves.append(v)
            out.append(self._treedef.unflatten(leaves))
        return out

    def __repr__(self):
        layout = "stacked" if self.stacked else "batch"
        ragged = f", sizes={self.sizes.tolist()}" if self.sizes is not None else ""
        shapes = [tuple(x.shape) for x in self._leaves]
        return f"PerReplica({layout}, replicas={self.num_replicas}, global shapes={shapes}{ragged})"


class Mirrored(DistributedValues):
    """A value that is the same on every replica (what ``MirroredVariable.value()`` gives)."""
