"""``rebatch``: exactly ``unbatch().batch(N)``, crossing input batch boundaries (docs/tf-behaviour.md#rebatch).

``batch_size`` may be a list of sizes used in turn; a size of 0 gives an empty batch. Deviations from
tf.data (docs/tf-behaviour.md#rebatch), both because tf.data's behaviour only ever surprises: sizes that are
all 0 (``rebatch(0)``) are rejected -- tf.data yields empty batches forever -- and no trailing empty batch
is emitted after the data ends (tf.data emits one when the next size in turn is 0).
"""

from __future__ import annotations

from .. import structure
from ..errors import InvalidArgumentError
from .base import Node, ShardWalk, UNKNOWN
from .common import check_bool, check_int
from .unbatch import check_batched


def check_sizes(batch_size) -> tuple[int, ...]:
    many = isinstance(batch_size, (list, tuple))
    sizes = tuple(check_int(s, "batch_size", "rebatch") for s in (batch_size if many else [batch_size]))
    if not sizes:
        raise InvalidArgumentError("rebatch: `batch_size` must not be an empty list.", "Rebatch")
    if any(s < 0 for s in sizes):
        raise InvalidArgumentError(f"rebatch: batch sizes must be >= 0, got {list(sizes)}.", "Rebatch")
    if not any(sizes):
        raise InvalidArgumentError(f"rebatch: batch sizes {list(sizes)} are all 0; that would yield empty batches "
                                   "forever (tf.data does; jaxfeed refuses).", "Rebatch")
    return sizes


class Rebatch(Node):
    kind = "Rebatch"
    shard_walk = ShardWalk.THROUGH

    def __init__(self, input_node, batch_size, drop_remainder=False):
        super().__init__((input_node,))
        self.sizes = check_sizes(batch_size)
        self.drop_remainder = check_bool(drop_remainder, "drop_remainder", "rebatch")
        if not self.lazy_spec:
            check_batched(input_node.element_spec, "rebatch")

    @property
    def lazy_spec(self):
        return self.inputs[0].lazy_spec

    def params(self):
        return {"batch_size": list(self.sizes), "drop_remainder": self.drop_remainder}

    def compute_spec(self):
        spec = self.inputs[0].element_spec
        check_batched(spec, "rebatch")
        size = self.sizes[0]
        static = all(s == size for s in self.sizes) and (
            self.drop_remainder or all(leaf.shape is not None and leaf.shape[0] is not None
                                       and leaf.shape[0] % size == 0 for leaf in structure.flatten(spec)))
        dim = size if static else None
        def rebatched(s):  # (ragged and sparse values are rebatched into ragged and sparse values)
            out = s.unbatched().with_leading(dim)
            return type(s)(out.shape, out.dtype)

        return structure.map_structure(rebatched, spec)

    def cardinality(self):
        return UNKNOWN
