"""In-memory datasets of elements already in hand: the windows of ``window`` and the groups of
``group_by_window``.

Elements that stack (same shapes) become a ``TensorSlices`` over the stacked arrays -- random access, so
a ``batch`` of the window is one gather. Elements of different shapes (variable-length sequences) stay a
list in an ``Elements`` node, read front to back.
"""

from __future__ import annotations

from .. import structure
from ..errors import InvalidArgumentError
from .base import Node


class Elements(Node):
    kind = "Elements"
    is_source = True

    def __init__(self, elements):
        super().__init__()
        self.elements = list(elements)

    def params(self):
        return {"num_elements": len(self.elements)}

    def compute_spec(self):
        specs = [structure.spec_of(e) for e in self.elements]
        if not specs:
            raise ValueError("Elements: an empty element list has no spec")
        leaves = [structure.flatten(s) for s in specs]
        merged = leaves[0]
        for other in leaves[1:]:
            merged = [a.most_specific_compatible(b) for a, b in zip(merged, other)]
        return structure.pack_as(specs[0], merged)

    def cardinality(self):
        return len(self.elements)

    def make_iterator(self, ctx):
        from ..iterators.elements import ElementsIterator

        return ElementsIterator(self, ctx)


def dataset_of_rows(batched):
    """A Dataset whose elements are the rows of ``batched`` (a structure of arrays)."""
    from ..dataset import Dataset
    from .tensor_slices import TensorSlices

    return Dataset(TensorSlices(batched))


def dataset_of_elements(elements: list):
    """A Dataset of ``elements`` (non-empty): stacked when their shapes agree, else a list."""
    from ..dataset import Dataset

    try:
        stacked = structure.stack(elements)
    except InvalidArgumentError:
        return Dataset(Elements(elements))
    return dataset_of_rows(stacked)
