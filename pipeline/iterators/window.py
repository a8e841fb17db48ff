"""``window``: a buffer of the input items the next windows need; each window is built from it.

Over an index stream the buffer holds indices and a window is one vectorised gather, sliced per component
into ``TensorSlices`` datasets; otherwise it holds elements, stacked per component. Items before the next
window's start are dropped as soon as they are read, so the buffer never exceeds one window's span.
The state is the input's plus the buffer (indices, or the buffered elements).
"""

from __future__ import annotations

import numpy as np

from .. import structure
from ..nodes.elements import dataset_of_elements, dataset_of_rows
from .base import Iterator
from ..engine.blocks import restored_error, saved_error
from ..engine.registry import builds
from ..nodes.window import Window

READ_BLOCK = 4096


@builds(Window)
class WindowIterator(Iterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        self._source = self.input.index_source
        self._size, self._shift, self._stride = node.size, node.shift, node.stride
        self._drop = node.drop_remainder
        self._buf: list = []  # items at input indices [read - len(buf), read)
        self._read = 0  # input items read so far
        self._keep_from = 0  # input index of the next window's start: earlier items are dropped
        self._window = 0  # index of the next window
        self._input_done = False
        self._done = False

    def _fill(self, upto: int) -> None:
        """Read until the item at index ``upto - 1`` is buffered or the input ends."""
        while self._read < upto and not self._input_done:
            want = min(upto - self._read, READ_BLOCK)
            got = self.input.next_indices(want).tolist() if self._source is not None else self.input.next_many(want)
            if not got:
                self._input_done = True
                break
            first = self._read
            self._read += len(got)
            skip = max(self._keep_from - first, 0)
            self._buf.extend(got[skip:] if skip else got)

    def _next(self):
        if self._done:
            raise StopIteration
        start = self._window * self._shift
        last = start + (self._size - 1) * self._stride
        self._fill(last + 1)
        if start >= self._read:
            self._done = True
            raise StopIteration
        buf_start = self._read - len(self._buf)
        items = self._buf[start - buf_start:min(last, self._read - 1) - buf_start + 1:self._stride]
        if self._drop and len(items) < self._size:
            self._done = True
            raise StopIteration
        self._window += 1
        self._keep_from = self._window * self._shift
        del self._buf[:max(self._keep_from - buf_start, 0)]
        return self._make_window(items)

    def _make_window(self, items):
        if self._source is not None:
            batch = self._source.gather(np.asarray(items, dtype=np.int64))
            return structure.map_structure(dataset_of_rows, batch)
        first = items[0]
        if not structure.is_nested(first):
            return dataset_of_elements(items)
        columns = zip(*(structure.flatten(e) for e in items))
        return structure.pack_as(first, [dataset_of_elements(list(col)) for col in columns])

    def children(self):
        return [self.input]

    def get_state(self):
        return {"input": self.input.get_state(), "buffer": list(self._buf), "read": self._read,
                "keep_from": self._keep_from, "window": self._window, "input_done": self._input_done,
                "done": self._done, "deferred": saved_error(self._deferred)}

    def set_state(self, state):
        self.input.set_state(state["input"])
        self._buf = list(state["buffer"])
        self._read = int(state["read"])
        self._keep_from = int(state["keep_from"])
        self._window = int(state["window"])
        self._input_done = bool(state["input_done"])
        self._deferred = restored_error(state.get("deferred"), "'deferred'")  # (absent from older states)
        self._done = bool(state["done"])
