"""``ragged_batch`` / ``sparse_batch`` iterators: take a batch's elements, then build each leaf once."""

from __future__ import annotations

import numpy as np

from .. import structure
from ..errors import InvalidArgumentError
from ..ragged import RaggedValue, SparseValue
from .base import BlockIterator, take_exactly
from ..engine.blocks import restored_error, saved_error
from ..engine.registry import builds
from ..nodes.ragged_batch import RaggedBatch, SparseBatch


class _Batcher(BlockIterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        self._label = node.label()

    def _next_many(self, n):
        out = []
        try:
            for _ in range(max(n, 1)):
                elements = take_exactly(self.input, self.node.batch_size)
                if not elements or (self.node.drop_remainder and len(elements) < self.node.batch_size):
                    break
                out.append(self._build(elements))
                if len(elements) < self.node.batch_size:
                    break
        except Exception as e:  # noqa: BLE001 - a batch's error: after the batches made before it
            return self._deliver_before(out, e)
        return out

    def children(self):
        return [self.input]

    def get_state(self):
        # 'deferred': an error met past the batches the last next_many returned, raised by the next call
        return {"input": self.input.get_state(), "deferred": saved_error(self._deferred)}

    def set_state(self, state):
        self.input.set_state(state["input"])
        self._deferred = restored_error(state.get("deferred"), "'deferred'")  # (absent from older states)


@builds(RaggedBatch)
class RaggedBatchIterator(_Batcher):
    def _build(self, elements):
        first = elements[0]
        columns = list(zip(*(structure.flatten(e) for e in elements))) if structure.is_nested(first) else [elements]
        leaves = []
        for i, (column, ragged) in enumerate(zip(columns, self.node.ragged_leaves())):
            arrays = [np.asarray(v) if not isinstance(v, bytes) else v for v in column]
            if not ragged or np.ndim(arrays[0]) == 0:
                leaves.append(structure.stack(list(column), what="ragged_batch"))
                continue
            inner = {np.shape(a)[1:] for a in arrays}
            if len(inner) > 1:
                raise InvalidArgumentError(f"{self._label}: leaf {i}: only the first dimension may differ between "
                                           f"elements (one ragged dimension), got shapes "
                                           f"{sorted({np.shape(a) for a in arrays})}.", "ragged_batch")
            lengths = np.fromiter((len(a) for a in arrays), dtype=np.int64, count=len(arrays))
            splits = np.concatenate([[0], np.cumsum(lengths)]).astype(self.node.row_splits_dtype)
            values = structure.concatenate(arrays) if len(arrays) > 1 else np.array(arrays[0], copy=True)
            leaves.append(RaggedValue(values, splits))
        return structure.pack_as(first, leaves) if structure.is_nested(first) else leaves[0]


@builds(SparseBatch)
class SparseBatchIterator(_Batcher):
    def _build(self, elements):
        row_shape = self.node.row_shape
        indices, values = [], []
        for r, element in enumerate(elements):
            arr = np.asarray(element)
            if arr.ndim != len(row_shape) or any(d > s for d, s in zip(arr.shape, row_shape)):
                raise InvalidArgumentError(f"{self._label}: element {r} of the batch has shape {arr.shape}, larger "
                                           f"than row_shape {list(row_shape)} or of another rank.", "sparse_batch")
            grid = np.indices(arr.shape).reshape(arr.ndim, -1).T if arr.size else np.zeros((0, arr.ndim), np.int64)
            indices.append(np.concatenate([np.full((len(grid), 1), r, np.int64), grid.astype(np.int64)], axis=1))
            values.append(arr.reshape(-1))
        return SparseValue(np.concatenate(indices) if indices else np.zeros((0, len(row_shape) + 1), np.int64),
                           np.concatenate(values) if values else np.zeros(0),
                           [len(elements)] + list(row_shape))
