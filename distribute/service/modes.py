"""Processing modes and sharding policies, with tf.data service's names and meanings.

- ``"parallel_epochs"`` (``ShardingPolicy.OFF``): every worker runs the whole dataset; consumers read the
  workers' streams round-robin (so each element is seen once per worker).
- ``"distributed_epoch"`` (``ShardingPolicy.DYNAMIC``): the source is cut into splits, handed out on demand;
  each element is processed once per epoch.
- ``FILE`` / ``DATA`` / ``FILE_OR_DATA`` / ``HINT``: static sharding -- worker ``i`` of ``n`` runs
  ``auto_shard(dataset, n, i, policy)`` (the same rewrite ``distribute`` uses); consumers read round-robin.
"""

from __future__ import annotations

import enum

from jaxfeed.pipeline.errors import InvalidArgumentError
from jaxfeed.pipeline.options import AutoShardPolicy


class ShardingPolicy(enum.IntEnum):
    OFF = 0
    DYNAMIC = 1
    FILE = 2
    DATA = 3
    FILE_OR_DATA = 4
    HINT = 5


_MODES = {"parallel_epochs": ShardingPolicy.OFF, "distributed_epoch": ShardingPolicy.DYNAMIC}
# the auto-shard policy a static sharding policy runs on each worker
STATIC = {ShardingPolicy.FILE: AutoShardPolicy.FILE, ShardingPolicy.DATA: AutoShardPolicy.DATA,
          ShardingPolicy.FILE_OR_DATA: AutoShardPolicy.AUTO, ShardingPolicy.HINT: AutoShardPolicy.HINT}


def sharding_policy(processing_mode) -> ShardingPolicy:
    """``"parallel_epochs"``, ``"distributed_epoch"`` or a ``ShardingPolicy`` -> the policy."""
    if isinstance(processing_mode, ShardingPolicy):
        return processing_mode
    if isinstance(processing_mode, str) and processing_mode in _MODES:
        return _MODES[processing_mode]
    raise InvalidArgumentError(f"service: processing_mode must be 'parallel_epochs', 'distributed_epoch' or a "
                               f"ShardingPolicy, got {processing_mode!r}.", "service")
