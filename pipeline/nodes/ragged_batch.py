"""``ragged_batch`` and ``sparse_batch``: batches of elements whose shapes differ, without padding.

``ragged_batch``: a component whose spec has every dimension known is stacked as ``batch`` does; any other
becomes a ``RaggedValue`` over the batch (its first dimension may differ between elements, the others
must agree -- one ragged dimension, as ``tf.RaggedTensor`` with ragged_rank 1). ``sparse_batch(batch_size,
row_shape)``: each element, of rank ``len(row_shape)`` and no larger than it, becomes the rows of a
``SparseValue`` with dense shape ``[n] + row_shape`` (every entry listed, as tf.data's
``dense_to_sparse_batch``)."""

from __future__ import annotations

import numpy as np

from .. import structure
from ..ragged import RaggedSpec, SparseSpec
from .base import Node
from .batch import batched_cardinality, refuse_unbatchable
from .common import check_bool, check_int


def _check_size(batch_size, what):
    if batch_size is None:
        raise ValueError(f"{what}: batch_size must be an integer, got None.")
    size = check_int(batch_size, "batch_size", what)
    if size <= 0:
        from ..errors import InvalidArgumentError

        raise InvalidArgumentError(f"{what}: batch_size must be greater than zero, got {size}.", what)
    return size


class RaggedBatch(Node):
    kind = "RaggedBatch"

    def __init__(self, input_node, batch_size, drop_remainder=False, row_splits_dtype=np.int64):
        super().__init__((input_node,))
        self.batch_size = _check_size(batch_size, "ragged_batch")
        self.drop_remainder = check_bool(drop_remainder, "drop_remainder", "ragged_batch")
        self.row_splits_dtype = np.dtype(row_splits_dtype)
        if self.row_splits_dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
            raise ValueError(f"ragged_batch: row_splits_dtype must be int32 or int64, got {row_splits_dtype!r}")
        if not input_node.lazy_spec:
            refuse_unbatchable(input_node.element_spec, "ragged_batch")

    def params(self):
        return {"batch_size": self.batch_size, "drop_remainder": self.drop_remainder}

    def ragged_leaves(self) -> list:
        """Per leaf of the input spec: True where the batch makes it ragged (a dimension not known)."""
        spec = self.inputs[0].element_spec
        refuse_unbatchable(spec, "ragged_batch")
        return [leaf.shape is None or None in leaf.shape for leaf in structure.flatten(spec)]

    def compute_spec(self):
        rows = self.batch_size if self.drop_remainder else None
        spec = self.inputs[0].element_spec
        leaves = [RaggedSpec((rows, None) + tuple(leaf.shape[1:]) if leaf.shape else (rows, None), leaf.dtype)
                  if ragged and leaf.shape != () else leaf.with_leading(rows)
                  for leaf, ragged in zip(structure.flatten(spec), self.ragged_leaves())]
        return structure.pack_as(spec, leaves)

    def cardinality(self):
        return batched_cardinality(self.inputs[0].cardinality(), self.batch_size, self.drop_remainder)


class SparseBatch(Node):
    kind = "SparseBatch"
    drop_remainder = False  # tf.data's dense_to_sparse_batch keeps a short last batch (it has no such argument)

    def __init__(self, input_node, batch_size, row_shape):
        super().__init__((input_node,))
        self.batch_size = _check_size(batch_size, "sparse_batch")
        self.row_shape = tuple(int(d) for d in np.atleast_1d(np.asarray(row_shape, dtype=np.int64)))
        spec = input_node.element_spec
        if not isinstance(spec, structure.TensorSpec) or isinstance(spec, (RaggedSpec, SparseSpec)):
            raise TypeError(f"sparse_batch: elements must be single tensors, got {spec!r}.")
        if spec.shape is not None and len(spec.shape) != len(self.row_shape):
            raise ValueError(f"sparse_batch: elements have rank {len(spec.shape)}, row_shape {list(self.row_shape)} "
                             f"has {len(self.row_shape)}.")

    def params(self):
        return {"batch_size": self.batch_size, "row_shape": list(self.row_shape)}

    def compute_spec(self):
        return SparseSpec((None,) + self.row_shape, self.inputs[0].element_spec.dtype)

    def cardinality(self):
        return batched_cardinality(self.inputs[0].cardinality(), self.batch_size, False)
