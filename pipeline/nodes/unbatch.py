"""``unbatch``: split every component along dimension 0 and yield the rows in order (docs/tf-behaviour.md#unbatch)."""

from __future__ import annotations

from .. import structure
from .base import INFINITE, Node, ShardWalk, UNKNOWN


def check_batched(spec, transformation: str) -> None:
    """ValueError unless every component has rank >= 1 and the known leading dimensions agree."""
    leading = []
    for path, leaf in structure.iter_structure_paths(spec):
        if isinstance(leaf, structure.DatasetSpec):
            raise TypeError(f"{transformation}: component {path} is a dataset; only arrays can be unbatched.")
        if leaf.shape is None:
            continue
        if len(leaf.shape) == 0:
            raise ValueError(f"{transformation}: Cannot unbatch an input with scalar components "
                             f"(component {path} is a scalar).")
        leading.append((path, leaf.shape[0]))
    known = [(p, d) for p, d in leading if d is not None]
    if any(d != known[0][1] for _, d in known):
        raise ValueError(f"{transformation}: Cannot unbatch an input whose components have different leading "
                         f"dimensions: {', '.join(f'{p}: {d}' for p, d in known)}; they must match.")


class Unbatch(Node):
    kind = "Unbatch"
    shard_walk = ShardWalk.THROUGH

    def __init__(self, input_node):
        super().__init__((input_node,))
        if not self.lazy_spec:
            check_batched(input_node.element_spec, "unbatch")

    @property
    def lazy_spec(self):
        return self.inputs[0].lazy_spec

    def compute_spec(self):
        spec = self.inputs[0].element_spec
        check_batched(spec, "unbatch")
        return structure.map_structure(lambda s: s.unbatched(), spec)

    def cardinality(self):
        """As tf.data: the input's cardinality times the leading dimension, when every component states
        the same one (a map's outputs state none: UNKNOWN); a spec that needs user code is not computed."""
        n = self.inputs[0].cardinality()
        if n == UNKNOWN or self.lazy_spec:
            return UNKNOWN
        dims = {leaf.shape[0] if leaf.shape else None for leaf in structure.flatten(self.inputs[0].element_spec)
                if isinstance(leaf, structure.TensorSpec)}
        if len(dims) != 1 or None in dims:
            return UNKNOWN
        (dim,) = dims
        if dim == 0:
            return UNKNOWN  # as tf.data: it states a count only for a positive batch dimension
        return INFINITE if n == INFINITE else n * dim
