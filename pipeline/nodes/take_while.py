"""``take_while``: the elements before the first one for which a predicate returns False."""

from __future__ import annotations

from .base import ShardWalk
from .filter import PredicateNode


class TakeWhile(PredicateNode):
    """The predicate follows ``filter``'s rules (a scalar bool, ValueError otherwise)."""

    kind = "TakeWhile"
    shard_walk = ShardWalk.THROUGH
    keeps_batch_dim = True
    transformation = "take_while"
