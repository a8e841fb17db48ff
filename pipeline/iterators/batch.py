"""``batch``: one vectorised gather per batch over index streams, else one stack per batch.

Over a stage whose results arrive stacked (a process ``map``: its workers stack each block), a batch is
made of row slices of those blocks -- one block's slice as it is, several concatenated -- instead of
unstacking every row and stacking them again. With ``num_parallel_calls`` the stacking (the memory copy)
runs on worker threads while the consumer gathers the next batch's elements.
"""

from __future__ import annotations

import collections
import operator
from concurrent import futures

import numpy as np

from .. import c_extensions, structure
from .base import Iterator, count_held, indices_exactly, take_exactly
from ..engine.blocks import Failure, restored_error, saved_error
from ..engine.pool import stage_threads
from ..engine.rows import RowQueue
from ..engine.registry import builds
from ..nodes.batch import Batch
from .random_access import RandomAccessIterator


@builds(Batch)
class BatchIterator(Iterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        self._size = node.batch_size
        self._drop = node.drop_remainder
        self._label = node.label()
        self._parallel = node.num_parallel_calls is not None
        self._rows = getattr(self.input, "stacks_rows", False)
        if self._rows and hasattr(self.input, "rows_per_batch"):  # a process map: blocks of whole batches
            self.input.rows_per_batch = self._size
        # a plain random-access stream (not a wrapper or another index stream): its indices are consecutive
        # positions, so a batch is a span the node gathers without an index array (``Node.gather_span``)
        self._spans = type(self.input) is RandomAccessIterator
        self._pool = None
        self._inflight: collections.deque = collections.deque()
        self._done = False

    def _collect(self):
        """The next batch's content: ``(SPAN, (node, start, stop))``, (random-access source, indices) or (None,
        elements); None at the end."""
        source = self.input.index_source
        if source is not None:
            if self._spans:
                start, stop = self.input.next_span(self._size)
                if start == stop or (self._drop and stop - start < self._size):
                    return None
                return SPAN, (source, start, stop)
            idx = indices_exactly(self.input, self._size)
            if len(idx) == 0 or (self._drop and len(idx) < self._size):
                return None
            return source, idx
        if self._rows:
            return self._collect_rows()
        elements = take_exactly(self.input, self._size)
        if not elements or (self._drop and len(elements) < self._size):
            return None
        return None, elements

    def _collect_rows(self):
        """The next batch from an input that may deliver stacked rows: ``(ROWS, parts)``, each part
        ``(True, stacked rows)`` or ``(False, elements)``."""
        parts, got = [], 0
        while got < self._size:
            rows, k = self.input.next_rows(self._size - got)
            if k == 0:
                break
            if k < 0:
                elements = self.input.next_many(self._size - got)
                if not elements:
                    break
                parts.append((False, elements))
                got += len(elements)
            else:
                parts.append((True, rows))
                got += k
        if not got or (self._drop and got < self._size):
            return None
        return ROWS, parts

    def _build(self, job):
        source, content = job
        if source is SPAN:
            node, start, stop = content
            return node.gather_span(start, stop)
        if source is ROWS:
            return self._join(content)
        if source is not None:
            return source.gather(content)
        return stack_fast(content, f"batch ({self._label})")

    def _join(self, parts):
        """One batch from row parts: a single stacked part as it is (views of its block), else the parts
        joined by a ``rows.RowQueue`` (one concatenate per leaf). Parts of different structures go the
        element way, which raises naming them."""
        what = f"batch ({self._label})"
        batches = [rows if is_rows else stack_fast(rows, what) for is_rows, rows in parts]
        if len(batches) == 1:
            return batches[0]
        if not all(structure.same_structure(batches[0], b) for b in batches[1:]):
            rows = [row for b in batches for row in structure.unstack_rows(b, structure.batched_len(b))]
            return stack_fast(rows, what)
        queue = RowQueue(what)
        for b in batches:
            queue.push(b)
        return queue.take_batch(queue.rows)

    def _next(self):
        if not self._parallel:
            if self._done:
                raise StopIteration
            job = self._collect()
            if job is None:
                self._done = True
                raise StopIteration
            return self._build(job)
        return self._next_parallel()

    def start_ahead(self):
        """Submit the first batches now (their rows are read on the thread that creates the iterator)."""
        if self._parallel and self._pool is None:
            self._submit_ahead()

    def _submit_ahead(self):
        if self._pool is None:
            npc = self.node.num_parallel_calls
            workers = npc if npc > 0 else stage_threads(self.ctx, self.ctx.cpu_count)
            # Options.threading.private_threadpool_size caps the threads, not the batches in flight
            self._pool = futures.ThreadPoolExecutor(stage_threads(self.ctx, workers),
                                                    thread_name_prefix="jaxfeed-batch")
            self._depth = workers
        while not self._done and len(self._inflight) < self._depth:
            job = self._collect()
            if job is None:
                self._done = True
                break
            self._inflight.append(self._pool.submit(self._build, job))

    def _next_parallel(self):
        self._submit_ahead()
        if not self._inflight:
            raise StopIteration
        return self._inflight.popleft().result()

    def children(self):
        return [self.input]

    def get_state(self):
        # 'pending': the batches made on threads, not yet delivered -- a batch that failed to stack as a Failure,
        # raised in its place (``_Ready``); 'deferred': an error met past the batches the last next_many
        # returned, raised by the next call
        pending = [_finished(f) for f in self._inflight]
        self._inflight.clear()
        state = {"input": self.input.get_state(), "done": self._done, "pending": pending,
                 "deferred": saved_error(self._deferred)}
        for batch in pending:  # keep them deliverable after saving
            self._inflight.append(_Ready(batch))
        return state

    @staticmethod
    def held(state, weight=None):
        """The rows of the finished batches not yet delivered (``Iterator.held``); a failed batch counts as
        one."""
        count = 0
        for batch in state["pending"]:
            if type(batch) is Failure:
                count += 1
            elif weight is None:
                count += structure.batched_len(batch)
            else:
                count += count_held(structure.unstack_rows(batch, structure.batched_len(batch)), weight)
        return count

    def set_state(self, state):
        self.input.set_state(state["input"])
        self._done = bool(state["done"])
        self._inflight = collections.deque(_Ready(b) for b in state["pending"])
        self._deferred = restored_error(state.get("deferred"), "'deferred'")  # (absent from older states)

    def close(self):
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        super().close()


ROWS = object()  # a job's source: the batch is made of row parts (``_collect_rows``)
SPAN = object()  # a job's source: the batch is the positions (node, start, stop) of a plain random-access stream


def _finished(future):
    """A submitted batch, finished: the batch, or the error making it raised as a ``Failure``."""
    try:
        return future.result()
    except Exception as e:  # noqa: BLE001 - raised in its place after a restore (``_Ready``)
        return Failure(e)


class _Ready:
    """A batch finished before a save, in place of its future: ``result`` gives it, or raises its error."""

    def __init__(self, value):
        self._value = value

    def result(self):
        if type(self._value) is Failure:
            raise self._value.error
        return self._value


def stack_fast(elements: list, what: str, alloc=None):
    """``structure.stack`` that writes into one preallocated array per leaf when the elements agree in type,
    dtype and shape (the common case); anything else -- strings, ragged shapes, mixed dtypes -- goes to
    ``structure.stack``, which also produces the error messages. ``alloc(dtype, shape)``, when given, may
    provide the array a leaf of like arrays is stacked into (``join_arrays``)."""
    first = elements[0]
    if not structure.is_nested(first):
        out = stack_leaf_fast(elements, first, alloc)
        return out if out is not None else structure.stack(elements, what=what)
    columns = _flat_columns(elements, first)
    if columns is _OTHER:
        return structure.stack(elements, what=what)  # flat, but not all alike: it raises, naming them
    if columns is None:  # nested: the same leaf count is not enough ({"a": {"x"}} vs {"b": {"x"}})
        if not all(structure.same_structure(first, e) for e in elements[1:]):
            return structure.stack(elements, what=what)  # different structures: it raises, naming them
        columns = list(zip(*[structure.flatten(e) for e in elements]))
    leaves = []
    for col in columns:
        out = stack_leaf_fast(col, col[0], alloc)
        if out is None:
            return structure.stack(elements, what=what)
        leaves.append(out)
    return structure.pack_as(first, leaves)


_OTHER = object()  # (_flat_columns) flat elements that are not all alike


def _flat_columns(elements, first):
    """The leaf columns of flat tuples or flat dicts (the common elements: a record's fields, a row's
    columns) in flatten order, checked once per batch: every element of ``first``'s type and length, and,
    for dicts, every one of ``first``'s keys (with the same count, the same key set: what ``stack`` checks).
    ``_OTHER`` when ``first`` is flat but the others are not all like it; None when ``first`` is not a flat
    tuple or dict (the caller flattens element by element)."""
    t = type(first)
    if t is not tuple and t is not dict:
        return None
    n = len(first)
    if not n or (any(map(structure.is_nested, first)) if t is tuple else
                 any(structure.is_nested(v) for v in first.values())):
        return None
    if operator.countOf(map(type, elements), t) != len(elements) or \
            operator.countOf(map(len, elements), n) != len(elements):
        return _OTHER
    if t is tuple:
        return list(zip(*elements))
    keys = structure.sorted_keys(first)  # flatten order: values by sorted key
    if n == 1:
        key = keys[0]
        return [[e[key] for e in elements]] if all(key in e for e in elements) else _OTHER
    try:
        return list(zip(*map(operator.itemgetter(*keys), elements)))
    except KeyError:  # an element with other keys
        return _OTHER


def stack_plain_tuples(values: list):
    """Flat tuples whose every column ``stack_leaf_fast`` takes -- numeric arrays of one dtype and shape,
    numpy scalars of one type, bytes -- as one batch (a tuple of arrays); else None. Such tuples are elements
    as they are (``structure.normalize`` returns them unchanged), so a map's results need no normalising
    before they are stacked: the fused map and batch stacks them straight away."""
    columns = _flat_columns(values, values[0])
    if columns is None or columns is _OTHER:
        return None
    leaves = []
    for col in columns:
        out = stack_leaf_fast(col, col[0])
        if out is None:
            return None
        leaves.append(out)
    return tuple(leaves)


def stack_leaf_fast(values, v0, alloc=None):
    """``values`` (``v0`` is the first) as one array when they are all arrays of one dtype and shape, or all
    numpy scalars of one type (not strings or dates); else None. (``alloc``: see ``join_arrays``.)"""
    t = type(v0)
    if t is np.ndarray:
        dtype, shape = v0.dtype, v0.shape
        if dtype.kind in "OSUV":
            return None
        for v in values:
            if type(v) is not np.ndarray or v.shape != shape or v.dtype != dtype:
                return None
        return join_arrays(values, dtype, shape, alloc)
    if t is bytes:  # scalar strings (records, lines, text fields): an object array, as ``structure.stack``
        if operator.countOf(map(type, values), bytes) != len(values):
            return None
        return np.fromiter(values, dtype=object, count=len(values))
    if isinstance(v0, np.generic) and v0.dtype.kind not in "OSUVMm":
        if operator.countOf(map(type, values), t) != len(values):  # all of one type (~30% cheaper than a set)
            return None
        return stack_scalars(values, v0.dtype)
    return None


def _join_into_python(values, out) -> None:
    """``join_into`` without the C extension: one copy per leaf's rows (``np.concatenate`` along the first
    axis, ~3x faster than ``np.stack`` for many small rows)."""
    n = len(values)
    np.concatenate(values, out=out.reshape((n * out.shape[1],) + out.shape[2:]))


# ``bytearray().join`` and ``_join_into_python``, or the C ways of ``pipeline/_values_c.c`` that copy without the
# GIL (see its doc): the extension not built (or built before it had ``join_into``), or ``JAXFEED_NO_C_EXT=1``,
# read at import.
_c = c_extensions.load("jaxfeed.pipeline._values_c")
_join = bytearray().join if _c is None else _c.join_released
_join_into = getattr(_c, "join_into", None) or _join_into_python


def join_into(values, out) -> None:
    """Arrays all of ``out``'s row dtype and shape (checked by the caller) copied into ``out``, row by row."""
    if out.ndim > 1:  # rows that are arrays: their bytes joined (a value that is no C-contiguous buffer: below)
        try:
            _join_into(values, out)
            return
        except (BufferError, ValueError, TypeError):
            pass
    np.stack(values, out=out)


def join_arrays(values, dtype, shape, alloc=None):
    """Arrays all of ``dtype`` and ``shape`` (checked by the caller) as one new writable array.
    Joining their bytes copies them in one C loop: ~12x faster than assigning 570 arrays of 32 int32
    one by one, ~25% for 128 images; the C join copies a large batch without the GIL, so that the other
    threads of a parallel map go on meanwhile (P4 as ported on two threads: ~6%). An array that is not
    C-contiguous has no plain buffer and goes by assignment, as does a batch of empty arrays.

    ``alloc(dtype, shape)`` may return the array to write into instead (a map worker process stacks a block
    straight into the shared memory that carries it back: ``engine/worker.py``), or None for a new one."""
    n = len(values)
    if alloc is not None:
        out = alloc(dtype, (n,) + shape)
        if out is not None:
            join_into(values, out)
            return out
    size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if size:
        try:
            data = _join(values)
        except (BufferError, ValueError, TypeError):
            data = None
        if data is not None and len(data) == n * size:
            return np.frombuffer(data, dtype=dtype).reshape((n,) + shape)
    out = np.empty((n,) + shape, dtype)
    for i, v in enumerate(values):
        out[i] = v
    return out


# numpy scalars of these types expose exactly their value's bytes through the buffer protocol
_JOINABLE = frozenset(np.dtype(t) for t in (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                                            np.uint32, np.uint64, np.float16, np.float32, np.float64,
                                            np.complex64, np.complex128))


def stack_scalars(values, dtype):
    """Numpy scalars all of one type (of ``dtype``) as one array. ``bytes.join`` reads their buffers in C,
    ~3x faster than ``np.fromiter``; long doubles (padding bytes) go through ``np.fromiter``."""
    if dtype in _JOINABLE:
        data = b"".join(values)
        if len(data) == len(values) * dtype.itemsize:
            return np.frombuffer(data, dtype=dtype).copy()  # a writable array that owns its memory
    return np.fromiter(values, dtype=dtype, count=len(values))
