"""``batch``: stack consecutive elements on a new leading dimension."""

from __future__ import annotations

from .. import structure
from ..errors import InvalidArgumentError
from .base import INFINITE, Node, ShardWalk, UNKNOWN
from .common import check_bool, check_int, check_parallelism, warn_deterministic_without_parallelism


def check_batch_size(batch_size, transformation="batch") -> int:
    batch_size = check_int(batch_size, "batch_size", transformation)
    if batch_size <= 0:
        raise InvalidArgumentError(f"{transformation}: Batch size must be greater than zero, got {batch_size}.",
                                   transformation)
    return batch_size


def batched_cardinality(n: int, batch_size: int, drop_remainder: bool) -> int:
    if n in (INFINITE, UNKNOWN):
        return n
    return n // batch_size if drop_remainder else -(-n // batch_size)


def refuse_unbatchable(spec, what: str = "batch") -> None:
    """TypeError for elements holding datasets (windows, a map's datasets): numpy cannot stack them into
    anything a consumer could use; flat_map/interleave them (or ``w.batch(n)`` inside) instead. (``batch``,
    ``padded_batch``, ``ragged_batch``; at build, or at the first batch after a map's lazy spec.) Ragged and
    sparse values are refused too (InvalidArgumentError, as when a batch meets them): padded_batch and
    ragged_batch failed on them with a numpy or comparison error of their own."""
    from ..ragged import RaggedSpec, SparseSpec

    for path, leaf in structure.iter_structure_paths(spec):
        if isinstance(leaf, structure.DatasetSpec):
            raise TypeError(f"{what}: component {path} of the elements is a Dataset ({leaf!r}), which cannot be "
                            "batched; use flat_map/interleave (e.g. `flat_map(lambda w: w.batch(n))`).")
        if isinstance(leaf, (RaggedSpec, SparseSpec)):
            raise InvalidArgumentError(f"Cannot {what} ragged or sparse values (component {path}, {leaf!r}): unbatch "
                                       "them, or convert them (to_list(), to_dense()) first.", what)


class Batch(Node):
    kind = "Batch"
    shard_walk = ShardWalk.THROUGH

    def __init__(self, input_node, batch_size, drop_remainder=False, num_parallel_calls=None, deterministic=None):
        super().__init__((input_node,))
        self.batch_size = check_batch_size(batch_size)
        self.drop_remainder = check_bool(drop_remainder, "drop_remainder", "batch")
        self.num_parallel_calls = check_parallelism(num_parallel_calls, "batch")
        warn_deterministic_without_parallelism(deterministic, num_parallel_calls, "batch")
        self.deterministic = deterministic
        if not self.lazy_spec:
            refuse_unbatchable(input_node.element_spec)

    @property
    def lazy_spec(self):
        return self.inputs[0].lazy_spec

    def params(self):
        p = {"batch_size": self.batch_size, "drop_remainder": self.drop_remainder}
        if self.num_parallel_calls is not None:
            p["num_parallel_calls"] = self.num_parallel_calls
        return p

    def compute_spec(self):
        refuse_unbatchable(self.inputs[0].element_spec)
        dim = self.batch_size if self.drop_remainder else None
        return structure.map_structure(lambda s: s.with_leading(dim), self.inputs[0].element_spec)

    def cardinality(self):
        return batched_cardinality(self.inputs[0].cardinality(), self.batch_size, self.drop_remainder)

    def batches_of(self):
        return int(self.batch_size)
