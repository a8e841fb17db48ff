"""``take_while``: the elements before the first one for which a predicate returns False."""

from __future__ import annotations

from .base import UNKNOWN
from .common import PassThrough, check_signature


class TakeWhile(PassThrough):
    """The predicate follows ``filter``'s rules (a scalar bool, ValueError otherwise)."""

    kind = "TakeWhile"

    def __init__(self, input_node, predicate):
        super().__init__((input_node,))
        check_signature(predicate, input_node, "take_while")
        self.predicate = predicate

    def params(self):
        return {"predicate": self.predicate}

    def functions(self):
        return {"predicate": self.predicate}

    def cardinality(self):
        return UNKNOWN  # [reference 0.4]: -2 even for an infinite or empty input

    def make_iterator(self, ctx):
        from ..iterators.take_while import TakeWhileIterator

        return TakeWhileIterator(self, ctx)
