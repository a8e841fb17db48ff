"""``padded_batch``: each batch is built into one preallocated array per component.

The array is filled with the padding value once (``np.full``) and each element is copied into its corner;
elements that already have the batch's shape are stacked without the fill. Over an index stream the batch
is one vectorised gather, padded as a block (all rows then share a shape).
"""

from __future__ import annotations

import numpy as np

from .. import structure
from ..errors import DataLossError, InvalidArgumentError
from ..engine.blocks import restored_error, saved_error
from ..engine.registry import builds
from ..nodes.padded_batch import PaddedBatch, default_padding
from ..nodes.signature import relax
from .base import Iterator, indices_exactly, take_exactly


@builds(PaddedBatch)
class PaddedBatchIterator(Iterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        self._size = node.batch_size
        self._drop = node.drop_remainder
        self._label = node.label()
        self._plans = None  # per component LeafPlan, from the spec or (lazy input) the first element
        self._position = 0  # input elements consumed before the next batch, for messages
        self._done = False

    def _plan_for(self, element):
        if self._plans is None:
            # after a map the spec would cost a run of user code; the element in hand has the same nest. Only
            # its ranks and dtypes, as the map's spec (``relax``): its dimensions would make the plan depend on
            # which element came first -- another error for the same data, another after a restore
            spec = relax(structure.spec_of(element)) if self.node.lazy_spec else self.node.inputs[0].element_spec
            self._plans = self.node.plan(spec)
        return self._plans

    def _next(self):
        if self._done:
            raise StopIteration
        source = self.input.index_source
        if source is not None:
            idx = indices_exactly(self.input, self._size)
            first = self._claim(len(idx))
            batch = source.gather(idx)
            plans = self._plans if self._plans is not None else self._plan_for(source.element_at(int(idx[0])))
            leaves = [self._pad_block(leaf, p, first) for leaf, p in zip(structure.flatten(batch), plans)]
            return structure.pack_as(batch, leaves)
        elements = take_exactly(self.input, self._size)
        first = self._claim(len(elements))
        plans = self._plan_for(elements[0])
        if not structure.is_nested(elements[0]):
            return self._pad_column(elements, plans[0], first)
        if not all(structure.same_structure(elements[0], e) for e in elements[1:]):
            return structure.stack(elements, what=f"batch ({self._label})")  # it raises, naming the element
        columns = zip(*(structure.flatten(e) for e in elements))
        return structure.pack_as(elements[0], [self._pad_column(list(col), p, first)
                                               for col, p in zip(columns, plans)])

    def _claim(self, n: int) -> int:
        """The input position of the first of a batch's ``n`` elements; StopIteration, for good, when they
        make no batch."""
        if n == 0 or (self._drop and n < self._size):
            self._done = True
            raise StopIteration
        first = self._position
        self._position += n
        return first

    # ------------------------------------------------------------------ padding
    def _target(self, shapes, plan, first):
        """The padded shape of one component for a batch whose elements have ``shapes``."""
        rank = len(shapes[0]) if plan.dims is None else len(plan.dims)
        for i, s in enumerate(shapes):
            if len(s) != rank:
                raise InvalidArgumentError(
                    f"{self._label}: All elements in a batch must have the same rank as the padded shape for "
                    f"component {plan.path}: expected rank {rank} but got element {first + i} with rank {len(s)}.",
                    self.node.kind)
        largest = tuple(max(s[d] for s in shapes) for d in range(rank)) if shapes else ()
        if plan.dims is None:
            return largest
        for d, fixed in enumerate(plan.dims):
            if fixed is not None and largest[d] > fixed:
                i = next(i for i, s in enumerate(shapes) if s[d] > fixed)
                raise DataLossError(
                    f"{self._label}: Attempted to pad to a smaller size than the input element. (component "
                    f"{plan.path} of input element {first + i} has shape {list(shapes[i])}; padded shape "
                    f"{[None if x is None else x for x in plan.dims]})", self.node.kind)
        return tuple(largest[d] if fixed is None else fixed for d, fixed in enumerate(plan.dims))

    def _pad_column(self, values, plan, first):
        shapes = [v.shape if type(v) is np.ndarray else np.shape(v) for v in values]
        target = self._target(shapes, plan, first)
        v0 = values[0]
        dtype = structure.STRING if isinstance(v0, bytes) else np.asarray(v0).dtype
        if all(s == target for s in shapes):
            return structure.stack(values, what=f"batch ({self._label})")
        pad = plan.value if plan.value is not None else default_padding(dtype)
        out = np.full((len(values),) + target, pad, dtype=dtype)
        if len(target) == 1:  # sequences: one masked assignment instead of a copy per element
            lengths = np.fromiter((s[0] for s in shapes), dtype=np.intp, count=len(shapes))
            out[np.arange(target[0]) < lengths[:, None]] = np.concatenate(values)
            return out
        for i, (v, s) in enumerate(zip(values, shapes)):
            out[(i,) + tuple(slice(0, d) for d in s)] = v
        return out

    def _pad_block(self, block, plan, first):
        block = np.asarray(block)
        target = self._target([block.shape[1:]], plan, first)
        if target == block.shape[1:]:
            return block
        pad = plan.value if plan.value is not None else default_padding(block.dtype)
        out = np.full((len(block),) + target, pad, dtype=block.dtype)
        out[(slice(None),) + tuple(slice(0, d) for d in block.shape[1:])] = block
        return out

    # ------------------------------------------------------------------ state
    def children(self):
        return [self.input]

    def get_state(self):
        # 'deferred': an error met past the batches the last next_many returned, raised by the next call
        return {"input": self.input.get_state(), "position": self._position, "done": self._done,
                "deferred": saved_error(self._deferred)}

    def set_state(self, state):
        self.input.set_state(state["input"])
        self._position = int(state["position"])
        self._done = bool(state["done"])
        self._deferred = restored_error(state.get("deferred"), "'deferred'")  # (absent from older states)
