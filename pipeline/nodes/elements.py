"""In-memory datasets of elements already in hand: the windows of ``window`` and the groups of
``group_by_window``.

Elements that stack (same shapes) become a ``TensorSlices`` over the stacked arrays -- random access, so
a ``batch`` of the window is one gather. Elements of different shapes (variable-length sequences) stay a
list in an ``Elements`` node, read front to back.
"""

from __future__ import annotations

import numpy as np

from .. import structure
from ..errors import InvalidArgumentError
from .base import Node
from .dataset_class import wrap


class Elements(Node):
    kind = "Elements"
    is_source = True

    def __init__(self, elements):
        super().__init__()
        self.elements = list(elements)

    def params(self):
        return {"num_elements": len(self.elements)}

    def compute_spec(self):
        """The most specific spec of all elements: a dim differing anywhere is None."""
        if not self.elements:
            raise ValueError("Elements: an empty element list has no spec")
        first = structure.spec_of(self.elements[0])
        leaves = structure.flatten(first)
        shapes = [list(leaf.shape) for leaf in leaves]
        nested = structure.is_nested(self.elements[0])
        for e in self.elements[1:]:
            for i, value in enumerate(structure.flatten(e) if nested else (e,)):
                shape, merged = np.shape(value), shapes[i]
                if merged is None:
                    continue
                if len(shape) != len(merged):
                    shapes[i] = None
                    continue
                for d, size in enumerate(shape):
                    if merged[d] != size:
                        merged[d] = None
        return structure.pack_as(first, [structure.TensorSpec(s, leaf.dtype) for s, leaf in zip(shapes, leaves)])

    def cardinality(self):
        return len(self.elements)


def dataset_of_rows(batched):
    """A Dataset whose elements are the rows of ``batched`` (a structure of arrays)."""
    from .tensor_slices import TensorSlices

    return wrap(TensorSlices(batched))


def dataset_of_elements(elements: list):
    """A Dataset of ``elements`` (non-empty): stacked when their shapes agree, else a list."""
    try:
        stacked = structure.stack(elements)
    except InvalidArgumentError:
        return wrap(Elements(elements))
    return dataset_of_rows(stacked)
