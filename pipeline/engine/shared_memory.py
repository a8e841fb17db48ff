"""Shared-memory slabs that carry big numpy arrays between the consumer and map worker processes.

The consumer owns every slab: it creates them (named ``jaxfeed_<pid>_<n>``) and lends one to a task -- the
input slab, into which the task's columns of like arrays are stacked (``pack_block``; the worker copies them
out, as writable as the consumer's were), and the result slab, into which the worker stacks its results
(``SlabWriter``). A result slab comes back with the answer: handed out with the results viewing it
(``SlabPool.hand_out``: lent again once nothing views it; a second mapping of the slab carries those views, so
closing the pool never meets them) or, past the hand-out budget, copied out (``take_back``). A slab is never
created and unlinked per array: sizes grow to what the tasks need (a slab too small is replaced). Workers only
attach (without registering with the resource tracker, which would otherwise "clean up" the consumer's
segments when a worker exits) and keep the last ``worker.MAX_ATTACHED`` mapped, less those the consumer
dropped (it tells them: ``FORGET``; an unlinked slab's memory stays in use while any process maps it).
``SlabPool.close`` unlinks everything (slabs still viewed are unmapped when their views go); the resource
tracker unlinks what is left if the consumer itself is killed.

Leaves smaller than ``MIN_SHM_BYTES`` travel pickled: below that size a pickle is cheaper than the
bookkeeping.
"""

from __future__ import annotations

import itertools
import mmap
import os
import sys
import weakref
from multiprocessing import resource_tracker, shared_memory

import numpy as np

from ..iterators.batch import join_into

PREFIX = "jaxfeed_"
MIN_SHM_BYTES = 4096
ALIGN = 64
_MIN_SLAB = 1 << 20
_counter = itertools.count()


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


class ShmRef:
    """A placeholder for an array written into a slab at ``offset``."""

    __slots__ = ("offset", "dtype", "shape")

    def __init__(self, offset, dtype, shape):
        self.offset, self.dtype, self.shape = offset, dtype, shape

    def __reduce__(self):
        return ShmRef, (self.offset, self.dtype, self.shape)


HANDOUT_BYTES = 1 << 30  # at most this much shared memory handed out at once (``SlabPool.hand_out``)...
HANDOUT_SHARE = 4  # ...and a quarter of what /dev/shm has free when the pool starts (a container's is often
# 64 MB: a worker writing into a slab beyond it dies of SIGBUS)


SHM_SPARE = 2  # (``shm_has_room``) a new slab needs this many times its size free in /dev/shm


def shm_has_room(nbytes: int) -> bool:
    """Whether /dev/shm has room for a new slab of ``nbytes`` (twice that free). A slab is a file in a tmpfs:
    creating it reserves nothing, and a worker writing into pages the tmpfs cannot supply dies of SIGBUS
    (a container's /dev/shm is often 64 MB). Without room the task goes without a slab: its results are
    pickled, slower but whole. True where /dev/shm cannot be measured."""
    free = _shm_free()
    return free is None or free >= SHM_SPARE * nbytes


def _shm_free() -> int | None:
    """Bytes free in /dev/shm, or None where it cannot be measured."""
    st = _shm_stat()
    return None if st is None else st.f_bavail * st.f_frsize


def shm_size() -> int | None:
    """The size of /dev/shm in bytes, or None where it cannot be measured."""
    st = _shm_stat()
    return None if st is None else st.f_blocks * st.f_frsize


def _shm_stat():
    try:
        return os.statvfs("/dev/shm")
    except (OSError, AttributeError):
        return None


def handout_budget() -> int:
    """The bytes of slabs a pool may hand out (0 where /dev/shm cannot be measured: results are copied)."""
    free = _shm_free() if os.name == "posix" else None  # (``_second_mapping`` maps a POSIX file descriptor)
    return 0 if free is None else min(HANDOUT_BYTES, free // HANDOUT_SHARE)


class SlabPool:
    """The consumer's slabs, lent per task. ``slots`` workers, up to ``per_worker`` slabs each, not counting
    those handed out with results (``hand_out``) until they come back. ``budget``: the bytes of slabs that
    may be handed out at once."""

    def __init__(self, slots: int, per_worker: int, budget: int = 0):
        self.per_worker = per_worker
        self.size = 0  # current slab size in bytes; 0 until some result needs shared memory
        self.free: list[list[shared_memory.SharedMemory]] = [[] for _ in range(slots)]
        self.count = [0] * slots  # slabs that exist per worker (free or lent)
        self.lent: dict[str, shared_memory.SharedMemory] = {}
        self.all: dict[str, shared_memory.SharedMemory] = {}
        self.budget = budget
        self.out: dict[str, shared_memory.SharedMemory] = {}  # handed out with results
        self.out_bytes = 0
        self._returned: list = []  # handed-out slabs nothing views any more (appended from any thread)
        self.dropped: list[list[str]] = [[] for _ in range(slots)]  # unlinked since each worker last heard
        self.closed = False
        if budget:
            _HANDING_OUT.add(self)

    def lend(self, worker: int):
        """A slab for a task of ``worker`` (its name), or None when none is needed yet or all of the
        worker's are lent (the task then goes without)."""
        if self._returned:
            self._take_returned()
        if self.size == 0:
            return None
        free = self.free[worker]
        while free and free[-1].size < self.size:  # too small since the pool grew: drop it
            self._destroy(free.pop())
        if not free:
            if self.count[worker] >= self.per_worker or not shm_has_room(self.size):
                return None
            self.count[worker] += 1
            slab = shared_memory.SharedMemory(name=f"{PREFIX}{os.getpid()}_{next(_counter)}", create=True,
                                              size=self.size)
            slab._jf_worker = worker
            self.all[slab.name] = slab
            free.append(slab)
        slab = free.pop()
        self.lent[slab.name] = slab
        return slab.name

    def want(self, nbytes: int) -> None:
        """A result needed ``nbytes`` of shared memory: grow future slabs to hold it."""
        if nbytes > self.size:
            self.size = max(_MIN_SLAB, _round_up(int(nbytes * 1.25), 1 << 16))

    def buffer(self, name):
        """The buffer of the lent slab ``name`` (None for None)."""
        return None if name is None else self.lent[name].buf

    def take_back(self, name: str, used: int):
        """One copy of the used bytes (the result's arrays become views into it); the slab is free again."""
        slab = self.lent.pop(name)
        data = bytearray(slab.buf[:used]) if used else None
        self.free[slab._jf_worker].append(slab)
        return data

    def give_back(self, name: str) -> None:
        """The slab ``name`` is free again (its contents are not needed)."""
        slab = self.lent.pop(name)
        self.free[slab._jf_worker].append(slab)

    def hand_out(self, name: str, used: int):
        """The used bytes of the lent slab ``name`` as a uint8 array viewing the slab itself -- the result's
        arrays become views of it, with no copy -- or None when the slabs already handed out hold the whole
        budget (``take_back`` copies then). The slab is lent again once nothing views it any more: that
        array and every array made from it gone (a finalizer, on whichever thread drops the last one, only
        queues it; the consumer's thread takes it back at its next ``lend``).

        Why: copying a task's results out of the slab into fresh memory cost P4's consumer ~9 us an image
        and ~6 page faults (glibc gives big freed blocks back), where the worker's own work is ~60; a slab
        lent again is already mapped on both sides. The budget bounds what a user holding batches keeps in
        /dev/shm; past it results are copied as before."""
        slab = self.lent[name]
        if self.out_bytes + slab.size > self.budget:
            return None
        del self.lent[name]
        del self.all[name]
        self.count[slab._jf_worker] -= 1
        self.out[name] = slab
        self.out_bytes += slab.size
        whole = np.frombuffer(_second_mapping(slab), np.uint8, count=used)
        finalizer = weakref.finalize(whole, self._returned.append, slab)
        finalizer.atexit = False  # at exit the arrays may still live: the slab then stays as it is
        return whole

    def _take_returned(self) -> None:
        """Slabs that came back are lent again (a worker keeps up to twice ``per_worker``: while a result
        is read, the next tasks already need slabs of their own)."""
        while self._returned:
            slab = self._returned.pop()
            if self.out.pop(slab.name, None) is None:
                continue
            self.out_bytes -= slab.size
            w = slab._jf_worker
            if (self.closed or slab.size < self.size or self.count[w] >= 2 * self.per_worker
                    or getattr(slab, "_jf_forked", False) or getattr(slab, "_jf_unlinked", False)):
                self._drop(slab)  # (``_before_fork``, ``trim``)
            else:
                self.count[w] += 1
                self.all[slab.name] = slab
                self.free[w].append(slab)

    def forget(self, name: str) -> None:
        """The task that held ``name`` will never answer (its worker died): the slab may be dirty; drop it."""
        slab = self.lent.pop(name, None)
        if slab is not None:
            self._destroy(slab)

    def _destroy(self, slab):
        if self.all.pop(slab.name, None) is not None:
            self.count[slab._jf_worker] -= 1
        self._drop(slab)

    def _drop(self, slab) -> None:
        """Unlink and unmap ``slab`` here; its worker is told to unmap it too (``take_dropped``): a slab's
        memory is freed only once no process maps it, and a worker keeps up to ``MAX_ATTACHED`` mapped."""
        _release(slab)
        if not self.closed:
            self.dropped[slab._jf_worker].append(slab.name)

    def take_dropped(self, worker: int) -> list[str]:
        """The names of ``worker``'s slabs dropped since the last call: the worker should unmap them."""
        names, self.dropped[worker] = self.dropped[worker], []
        return names

    def held_bytes(self) -> int:
        """Bytes of /dev/shm this pool's own slabs hold, those handed out that came back taken back first (those
        still handed out are the user's until they go). For a pool no iterator uses (``_take_returned``)."""
        self._take_returned()
        return sum(slab.size for slab in self.all.values())

    def trim(self) -> None:
        """Hold nothing in /dev/shm (an idle pool: ``_Pool.retire``): every free slab dropped, and those still
        handed out unlinked -- their views keep them mapped, and their memory goes with the last view (as
        ``close`` does), never lent again."""
        self._take_returned()
        for free in self.free:
            while free:
                self._destroy(free.pop())
        for slab in list(self.out.values()):
            _unlink(slab)
            slab._jf_unlinked = True
            self.dropped[slab._jf_worker].append(slab.name)  # (the worker that wrote it may map it)

    def close(self) -> None:
        self.closed = True
        for slab in list(self.all.values()):
            self._destroy(slab)
        self.free = [[] for _ in self.free]
        self.lent.clear()
        for slab in list(self.out.values()):  # still viewed: unlinked now, unmapped when the views go
            _unlink(slab)
        self._take_returned()


def _second_mapping(slab) -> mmap.mmap:
    """The slab mapped a second time, for the arrays handed out (made once per slab, so it is faulted in
    once). The results' arrays keep this mapping alive by themselves: closing the ``SharedMemory`` -- at the
    pool's close, or by its ``__del__`` -- never meets their exports (it raised BufferError), and the pages
    are unmapped when the last array goes."""
    mapping = getattr(slab, "_jf_handout", None)
    if mapping is None:
        mapping = slab._jf_handout = mmap.mmap(slab._fd, slab.size)
    return mapping


# A fork while results view slabs: the child inherits the views as shared mappings, not as the private memory a
# copy would have been. Without care, the parent lending such a slab again lets a worker overwrite what the child
# reads, and the child writing into its array (or the parent into its own) changes the other's. So a slab handed
# out when the process forks is never lent again (the parent unmaps it once its views go), and the child replaces
# each handed-out slab's mapping, at the same address, by a private copy: what fork gives any other memory.
_HANDING_OUT: "weakref.WeakSet[SlabPool]" = weakref.WeakSet()
_MAP_FIXED = 0x10  # (Linux's value; ``mmap`` does not export it)


def _before_fork() -> None:
    for pool in list(_HANDING_OUT):
        for slab in list(pool.out.values()):
            slab._jf_forked = True


def _after_fork_in_child() -> None:
    for pool in list(_HANDING_OUT):
        for slab in list(pool.out.values()):
            mapping = getattr(slab, "_jf_handout", None)
            if mapping is not None:
                _privatize(mapping)


def _privatize(mapping: mmap.mmap) -> None:
    """Replace ``mapping``'s pages, at the same address, by a private anonymous copy of them (Linux)."""
    import ctypes

    if not sys.platform.startswith("linux"):
        return
    size = len(mapping)
    view = ctypes.c_char.from_buffer(mapping)
    address = ctypes.addressof(view)
    del view
    data = ctypes.string_at(address, size)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    got = libc.mmap(address, size, mmap.PROT_READ | mmap.PROT_WRITE,
                    mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_FIXED, -1, 0)
    if got != address:  # (cannot happen with MAP_FIXED short of running out of memory: left shared)
        return
    ctypes.memmove(address, data, size)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


def _unlink(slab) -> None:
    try:
        slab.unlink()
    except FileNotFoundError:
        pass


def _release(slab) -> None:
    """Unlink and unmap ``slab`` (a slab still viewed stays mapped until its views go)."""
    _unlink(slab)
    try:
        slab.close()
    except BufferError:
        pass


# ---------------------------------------------------------------------------------------- worker side
def attach(name: str) -> shared_memory.SharedMemory:
    """Open a consumer's slab in a worker without registering it with the resource tracker."""
    register = resource_tracker.register
    resource_tracker.register = lambda *args, **kwargs: None
    try:
        return shared_memory.SharedMemory(name=name)
    finally:
        resource_tracker.register = register


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
        at = _round_up(self.offset, ALIGN)
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
        at = _round_up(self.offset, ALIGN)
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


STOP = b"S"  # the message that ends a map worker (``engine/worker.py``); a task is a pickle (never b"S")
FORGET = b"F"  # followed by a pickled list of slab names: the consumer unlinked them, the worker unmaps them
