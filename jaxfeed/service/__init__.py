"""``jaxfeed.service``: tf.data service's input processing on Ray (code in ``jaxfeed.distribute.service``)."""

from jaxfeed.distribute.service import (LocalService, ShardingPolicy, connect, distribute, from_dataset_id,
                                        register_dataset, start)

__all__ = ["LocalService", "ShardingPolicy", "connect", "distribute", "from_dataset_id", "register_dataset", "start"]
