"""What a task's block and its results look like in a slab (``shared_memory.SlabPool`` lends the slabs):
the consumer stacks a task's input columns of like arrays into its input slab (``pack_block``; the worker
copies them out, ``unpack_block``), and the worker places its results' big arrays in the result slab
(``SlabWriter``), sending ``ShmRef`` placeholders where they lie (``unpack_leaves`` puts views back).

Leaves smaller than ``MIN_SHM_BYTES`` travel pickled: below that size a pickle is cheaper than the
bookkeeping.
"""

from __future__ import annotations

import numpy as np

from ..iterators.batch import join_into

MIN_SHM_BYTES = 4096
ALIGN = 64


def round_up(n: int, to: int) -> int:
    return -(-n // to) * to


class ShmRef:
    """A placeholder for an array written into a slab at ``offset``."""

    __slots__ = ("offset", "dtype", "shape")

    def __init__(self, offset, dtype, shape):
        self.offset, self.dtype, self.shape = offset, dtype, shape

    def __reduce__(self):
        return ShmRef, (self.offset, self.dtype, self.shape)


def big_array(x) -> bool:
    """Whether ``x`` is an array that travels in a slab (a result's leaf; an input column's, when it is C order
    and like its column: ``pack_block``)."""
    return type(x) is np.ndarray and x.nbytes >= MIN_SHM_BYTES and x.dtype != object


TAKEN_APART = (np.ndarray, tuple, dict)  # the elements whose array leaves ``pack_block`` may stack (plain ones)


class SlabWriter:
    """Arrays placed one after another in a slab (``buf``, a memoryview; None: no slab lent), from ``start``.

    ``alloc`` hands out an array in the slab for a caller to write into (a worker stacks a block straight
    into it: one copy of the results instead of two, and no fresh memory); ``pack`` turns a result's leaves
    into ``ShmRef`` placeholders, copying the big ones that are not in the slab yet. When the slab is too
    small, ``offset`` keeps counting: the bytes a slab would need (``pack`` returns it)."""

    def __init__(self, buf, start: int = 0):
        self.buf = buf
        self.offset = start
        self.short = False  # some array did not fit
        self._placed: dict = {}  # id(array) -> (array, ShmRef): arrays handed out by ``alloc``

    def _room(self, nbytes: int):
        """The offset for ``nbytes`` more bytes, or None (counted all the same) when they do not fit."""
        at = round_up(self.offset, ALIGN)
        self.offset = at + nbytes
        if self.buf is None or self.offset > len(self.buf):
            self.short = True
            return None
        return at

    def alloc(self, dtype, shape, count_short: bool = False):
        """A new array of ``dtype`` and ``shape`` in the slab, or None (small, objects, or no room). An array
        that does not fit is counted in ``offset`` only with ``count_short`` (a result's leaf not placed here
        is counted by ``pack``, which copies or counts it)."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        nbytes = count * dtype.itemsize
        if dtype.hasobject or nbytes < MIN_SHM_BYTES:
            return None
        at = round_up(self.offset, ALIGN)
        if self.short or self.buf is None or at + nbytes > len(self.buf):
            if count_short:
                self._room(nbytes)
            self.short = True
            return None
        self.offset = at + nbytes
        out = np.frombuffer(self.buf, dtype=dtype, count=count, offset=at).reshape(shape)
        self._placed[id(out)] = (out, ShmRef(at, dtype.str, tuple(shape)))
        return out

    def ref(self, array) -> ShmRef:
        """The placeholder for an array ``alloc`` handed out."""
        return self._placed[id(array)][1]

    def pack(self, leaves: list):
        """(leaves with big arrays replaced by ``ShmRef``, end offset), or (None, bytes needed)."""
        out = []
        for x in leaves:
            placed = self._placed.get(id(x))
            if placed is not None and placed[0] is x:
                out.append(placed[1])
            elif big_array(x):
                at = self._room(x.nbytes)
                if at is not None:
                    np.copyto(np.frombuffer(self.buf, dtype=x.dtype, count=x.size, offset=at).reshape(x.shape), x,
                              casting="no")
                    out.append(ShmRef(at, x.dtype.str, x.shape))
            else:
                out.append(x)
        if self.short:
            return None, self.offset
        return out, self.offset


def has_big_leaf(leaves: list) -> bool:
    return any(big_array(x) for x in leaves)


def unpack_leaves(leaves: list, data) -> list:
    """Replace ``ShmRef`` placeholders by arrays viewing ``data`` (the consumer's copy of the slab)."""
    out = []
    for x in leaves:
        if type(x) is ShmRef:
            dtype = np.dtype(x.dtype)
            count = int(np.prod(x.shape, dtype=np.int64))
            x = np.frombuffer(data, dtype=dtype, count=count, offset=x.offset).reshape(x.shape)
        out.append(x)
    return out


# ------------------------------------------------------------------------------------- inputs of a task
class Columns:
    """A task's block of input elements as it crosses to a worker: its elements' leaves by column, each
    column of like arrays stacked into the task's input slab (a ``ShmRef``) and the others as lists. What the
    worker rebuilds from it (``unpack_block``) equals the block: the same structures, and arrays of the same
    dtype, shape and writability, its own as a pickle's would be (pickling 128 images of P4 took the
    consumer ~8 us each; stacking them into the slab ~1)."""

    __slots__ = ("kind", "keys", "columns")

    def __init__(self, kind, keys, columns):
        self.kind, self.keys, self.columns = kind, keys, columns  # kind: "array", "tuple" or "dict"

    def __reduce__(self):
        return Columns, (self.kind, self.keys, self.columns)


def pack_block(block: list, writer: SlabWriter):
    """``block`` as ``Columns`` when one of its columns is stacked into ``writer``'s slab, else the block as it
    is. Only single arrays, plain tuples and plain dicts (one key order) are taken apart: a namedtuple or
    nested element goes as it is."""
    first = block[0]
    t = type(first)
    if t is np.ndarray:
        kind, keys, columns = "array", None, [block]
    elif t is tuple and all(type(e) is tuple and len(e) == len(first) for e in block):
        kind, keys, columns = "tuple", None, list(zip(*block))
    elif t is dict:
        keys = list(first)
        if not all(type(e) is dict and list(e) == keys for e in block):
            return block
        kind, columns = "dict", [[e[k] for e in block] for k in keys]
    else:
        return block
    out, stacked = [], False
    for column in columns:
        packed = _stack_column(column, writer)
        stacked = stacked or packed is not None
        out.append(list(column) if packed is None else packed)
    return Columns(kind, keys, out) if stacked else block


def _stack_column(column, writer: SlabWriter):
    """(``ShmRef``, writable) for a column of like arrays stacked into the slab; None when it is not one
    (or the slab is too small: ``writer`` counts what it would need)."""
    v0 = column[0]
    if type(v0) is not np.ndarray or not v0.ndim or v0.dtype.hasobject:
        return None
    dtype, shape, writable = v0.dtype, v0.shape, v0.flags.writeable
    for v in column:  # one writability for all (a row keeps its own), C order (a row of the stack is C order:
        # an F-order array, which pickling keeps F order, stays in the pickle)
        if (type(v) is not np.ndarray or v.dtype != dtype or v.shape != shape or v.flags.writeable != writable
                or not v.flags.c_contiguous):
            return None
    out = writer.alloc(dtype, (len(column),) + shape, count_short=True)
    if out is None:
        return None
    join_into(column, out)
    return writer.ref(out), writable


def unpack_block(block, buf) -> list:
    """The elements ``pack_block`` packed, their stacked columns copied out of ``buf`` (the worker's mapping
    of the input slab)."""
    if type(block) is not Columns:
        return block
    columns = []
    for column in block.columns:
        if type(column) is tuple:
            ref, writable = column
            count = int(np.prod(ref.shape, dtype=np.int64))
            stacked = np.frombuffer(buf, dtype=np.dtype(ref.dtype), count=count, offset=ref.offset)
            # a copy of its own: a function that keeps an element past its call (the last input, for a
            # difference) must not see the slab's next task there (~1.5 us an image of P4's 60)
            stacked = stacked.reshape(ref.shape).copy()
            if not writable:
                stacked.flags.writeable = False
            column = list(stacked)
        columns.append(column)
    if block.kind == "array":
        return columns[0]
    if block.kind == "tuple":
        return list(zip(*columns))
    keys = block.keys
    return [dict(zip(keys, row)) for row in zip(*columns)]
