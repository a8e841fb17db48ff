"""jaxfeed.distribute: tf.distribute's strategies rebuilt on JAX.

Replicas are JAX devices, replicated values are ``jax.Array``s with a ``NamedSharding``, per-replica
computation is ``shard_map`` over the mesh axis ``'replica'``, and hosts are joined by ``jax.distributed``.
See the README section "Distribution" for the guarantees (split rules, reduction order, timeouts).

``auto_shard`` / ``auto_shard_plan`` (the worker-level graph rewrite) do not need any JAX device.
"""

from .auto_sharding import AutoShardError, AutoShardPlan, auto_shard, auto_shard_plan
from .context import get_replica_context, get_strategy, has_strategy, in_cross_replica_context
from .strategy import (InputContext, InputOptions, InputReplicationMode, ReplicaContext, Strategy,
                       ValueContext)
from .values import (DistributedValues, PerReplica, PerReplicaSpec, ReduceOp, VariableAggregation,
                     VariableSynchronization)
from .variables import MirroredVariable, SyncOnReadVariable, Variable


def __getattr__(name):  # JAX-backed classes import JAX on first use only
    if name == "MirroredStrategy":
        from .mirrored import MirroredStrategy

        return MirroredStrategy
    if name == "MultiWorkerMirroredStrategy":
        from .multi_worker import MultiWorkerMirroredStrategy

        return MultiWorkerMirroredStrategy
    if name in ("TFConfigClusterResolver", "ClusterSpec"):
        from . import cluster

        return getattr(cluster, name)
    if name == "DistributedDataset":
        from .distributed_dataset import DistributedDataset

        return DistributedDataset
    if name == "DistributedIterator":
        from .distributed_iterator import DistributedIterator

        return DistributedIterator
    if name == "InputFeed":
        from .feed import InputFeed

        return InputFeed
    raise AttributeError(f"module 'jaxfeed.distribute' has no attribute {name!r}")


__all__ = [
    "MirroredStrategy", "MultiWorkerMirroredStrategy", "Variable", "MirroredVariable", "ReduceOp", "InputContext",
    "ValueContext", "InputOptions", "InputReplicationMode", "VariableAggregation", "VariableSynchronization",
    "get_strategy", "has_strategy", "get_replica_context", "in_cross_replica_context", "TFConfigClusterResolver",
    "ClusterSpec", "SyncOnReadVariable", "PerReplica", "PerReplicaSpec", "DistributedValues", "ReplicaContext", "Strategy", "DistributedDataset",
    "DistributedIterator", "InputFeed", "auto_shard", "auto_shard_plan", "AutoShardPlan", "AutoShardError",
]
