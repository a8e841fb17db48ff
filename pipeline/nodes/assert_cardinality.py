"""``assert_cardinality``: the input's elements, and an error as soon as their count is proven different from
the one the user asserted (tf.data.experimental.assert_cardinality).

The static ``cardinality()`` is the asserted one, which is what the user wants from it: a pipeline whose
length is unknown (a filter, a file reader) reports a length that ``distribute`` and ``len`` can use, and
the iterator keeps that promise or raises ``FailedPreconditionError``."""

from __future__ import annotations

from .base import INFINITE, ShardWalk, UNKNOWN
from .common import PassThrough, check_int


class AssertCardinality(PassThrough):
    kind = "AssertCardinality"
    shard_walk = ShardWalk.THROUGH
    keeps_batch_dim = True

    def __init__(self, input_node, expected_cardinality):
        super().__init__((input_node,))
        expected = check_int(expected_cardinality, "expected_cardinality", "assert_cardinality")
        if expected < 0 and expected != INFINITE:
            from ..errors import InvalidArgumentError

            raise InvalidArgumentError(f"assert_cardinality: `expected_cardinality` must be non-negative or "
                                       f"INFINITE_CARDINALITY, got {expected}.", "assert_cardinality")
        known = input_node.cardinality()
        if known not in (UNKNOWN, expected):  # TF checks a known cardinality when the dataset is built
            from ..errors import FailedPreconditionError

            raise FailedPreconditionError(f"Input dataset was expected to contain {element_count(expected)} "
                                          f"but contained {element_count(known)}.", "assert_cardinality")
        self.expected = expected

    def params(self):
        return {"expected_cardinality": self.expected}

    def cardinality(self):
        return self.expected


def element_count(n: int) -> str:
    """TF's wording: "an infinite number of elements", "1 element", "N elements"."""
    if n == INFINITE:
        return "an infinite number of elements"
    return "1 element" if n == 1 else f"{n} elements"
