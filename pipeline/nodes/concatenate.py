"""``concatenate``: the elements of one dataset, then those of another."""

from __future__ import annotations

import weakref

import numpy as np

from .. import structure
from .base import INFINITE, Node, ShardWalk, UNKNOWN
from .common import UNKNOWN_SPEC


def common_spec(specs: list, transformation: str):
    """The spec that covers every spec in ``specs``: same structure and dtypes (TypeError "Incompatible
    dataset elements" otherwise), shapes relaxed to the most specific compatible shape [docs/tf-behaviour.md#concatenate]."""
    known = [s for s in specs if s is not UNKNOWN_SPEC]  # a function that never ran tells nothing
    if not known:
        return UNKNOWN_SPEC
    result = known[0]
    for other in known[1:]:
        if not structure.same_structure(result, other) or not all(
                _leaf_compatible(a, b) for a, b in zip(structure.flatten(result), structure.flatten(other))):
            raise TypeError(f"{transformation}: Incompatible dataset elements:\n  {result!r} vs.\n  {other!r}")
        result = structure.map_structure(_relax, result, other)
    return result


def _leaf_compatible(a, b) -> bool:
    if isinstance(a, structure.TensorSpec) and isinstance(b, structure.TensorSpec):
        return a.dtype == b.dtype and type(a) is type(b)  # (ragged or sparse values and dense ones: no one spec)
    return a == b


def _relax(a, b):
    return a.most_specific_compatible(b) if isinstance(a, structure.TensorSpec) else a


# node -> its spec_key_order, kept beside the node (nodes stay plain data that pickles, without closures)
_orders: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_UNSET = object()


class Concatenate(Node):
    """tf.data's ``concatenate`` [docs/tf-behaviour.md#concatenate]. Random-access when both inputs are and their leaves have
    the same fully known shapes (so a gather across the seam is one array per leaf)."""

    kind = "Concatenate"
    shard_walk = ShardWalk.EVERY_INPUT

    def __init__(self, first, second):
        super().__init__((first, second))
        self._spec = common_spec([first.element_spec, second.element_spec], "concatenate")

    def compute_spec(self):
        return common_spec([i.element_spec for i in self.inputs], "concatenate")

    def sample(self):
        from .common import sample_element

        try:
            return sample_element(self.inputs[0])
        except StopIteration:
            return sample_element(self.inputs[1])

    def cardinality(self):
        a, b = (i.cardinality() for i in self.inputs)
        if INFINITE in (a, b):
            return INFINITE
        if UNKNOWN in (a, b):
            return UNKNOWN
        return a + b

    # ------------------------------------------------------------------ random access
    def random_access(self):
        first, second = self.inputs
        if not (first.random_access() and second.random_access()):
            return False
        a, b = structure.flatten(first.element_spec), structure.flatten(second.element_spec)
        return all(isinstance(x, structure.TensorSpec) and x.shape is not None and None not in x.shape
                   and x == y for x, y in zip(a, b))

    def length(self):
        return self.inputs[0].length() + self.inputs[1].length()

    def gather(self, indices):
        indices = np.asarray(indices, dtype=np.int64)
        first, second = self.inputs
        n = first.length()
        in_second = indices >= n
        if not in_second.any():
            return self._in_spec_order(first.gather(indices))
        if in_second.all():
            return self._in_spec_order(second.gather(indices - n))
        parts = (structure.flatten(first.gather(indices[~in_second])),
                 structure.flatten(second.gather(indices[in_second] - n)))
        leaves = []
        for a, b in zip(*parts):
            out = np.empty((len(indices),) + np.shape(a)[1:], dtype=np.asarray(a).dtype)
            out[~in_second] = a
            out[in_second] = b
            leaves.append(out)
        return structure.pack_as(self.element_spec, leaves)

    def element_at(self, index):
        n = self.inputs[0].length()
        element = self.inputs[0].element_at(index) if index < n else self.inputs[1].element_at(index - n)
        return self._in_spec_order(element)

    def _in_spec_order(self, value):
        """``value`` (an element or a gathered batch) with its dicts in the spec's key order (tf.data packs
        every element by the spec, so the second input's dicts take the first's order)."""
        order = _orders.get(self, _UNSET)
        if order is _UNSET:
            order = _orders[self] = structure.spec_key_order(self.element_spec)
        return value if order is None else order(value)
