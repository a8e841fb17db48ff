"""``filter``: keep the elements for which a predicate returns True; and the predicate node ``take_while``
shares."""

from __future__ import annotations

from .base import ShardWalk, UNKNOWN
from .common import PassThrough, check_signature


class PredicateNode(PassThrough):
    """A stage that judges its input's elements with ``predicate`` (filter, take_while); a subclass names
    its ``transformation`` (for argument errors) and builds its iterator."""

    transformation = ""

    def __init__(self, input_node, predicate):
        super().__init__((input_node,))
        check_signature(predicate, input_node, self.transformation)
        self.predicate = predicate

    def params(self):
        return {"predicate": self.predicate}

    def functions(self):
        return {"predicate": self.predicate}

    def cardinality(self):
        return UNKNOWN  # [docs/tf-behaviour.md#cardinality]: -2 even for an infinite or empty input


class Filter(PredicateNode):
    """tf.data's ``filter`` [docs/tf-behaviour.md#filter]. The predicate must return a scalar bool (a Python bool, a numpy
    ``bool_`` or a 0-d bool array); any other result raises ValueError naming this node, at the element
    where it happens (tf.data finds this when tracing; we only know once the predicate has run)."""

    kind = "Filter"
    shard_walk = ShardWalk.THROUGH
    keeps_batch_dim = True
    transformation = "filter"
