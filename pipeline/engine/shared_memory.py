"""Shared-memory slabs that carry numpy results from worker processes back to the consumer.

The consumer owns every slab: it creates them (named ``jaxfeed_<pid>_<n>``), lends one to a task, copies
the arrays out when the result arrives and lends the slab again -- a slab is never created and unlinked
per array. Workers only attach (without registering with the resource tracker, which would otherwise
"clean up" the consumer's segments when a worker exits). A slab that turns out too small is replaced by
a larger one, so sizes adapt to the results. ``SlabPool.close`` unlinks everything; the resource tracker
unlinks what is left if the consumer itself is killed.

Leaves smaller than ``MIN_SHM_BYTES`` travel pickled: below that size a pickle is cheaper than the
bookkeeping.
"""

from __future__ import annotations

import itertools
import os
from multiprocessing import resource_tracker, shared_memory

import numpy as np

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


class SlabPool:
    """The consumer's slabs, lent per task. ``slots`` workers, up to ``per_worker`` slabs each."""

    def __init__(self, slots: int, per_worker: int):
        self.per_worker = per_worker
        self.size = 0  # current slab size in bytes; 0 until some result needs shared memory
        self.free: list[list[shared_memory.SharedMemory]] = [[] for _ in range(slots)]
        self.count = [0] * slots  # slabs that exist per worker (free or lent)
        self.lent: dict[str, shared_memory.SharedMemory] = {}
        self.all: dict[str, shared_memory.SharedMemory] = {}

    def lend(self, worker: int):
        """A slab for a task of ``worker`` (its name and size), or None when none is needed yet."""
        if self.size == 0:
            return None
        free = self.free[worker]
        while free and free[-1].size < self.size:  # too small since the pool grew: drop it
            self._destroy(free.pop())
        if not free:
            if self.count[worker] >= self.per_worker:
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

    def take_back(self, name: str, used: int):
        """One copy of the used bytes (the result's arrays become views into it); the slab is free again."""
        slab = self.lent.pop(name)
        data = bytearray(slab.buf[:used]) if used else None
        self.free[slab._jf_worker].append(slab)
        return data

    def forget(self, name: str) -> None:
        """The task that held ``name`` will never answer (its worker died): the slab may be dirty; drop it."""
        slab = self.lent.pop(name, None)
        if slab is not None:
            self._destroy(slab)

    def _destroy(self, slab):
        if self.all.pop(slab.name, None) is not None:
            self.count[slab._jf_worker] -= 1
        try:
            slab.close()
            slab.unlink()
        except (FileNotFoundError, BufferError):
            pass

    def close(self) -> None:
        for slab in list(self.all.values()):
            self._destroy(slab)
        self.free = [[] for _ in self.free]
        self.lent.clear()


# ---------------------------------------------------------------------------------------- worker side
def attach(name: str) -> shared_memory.SharedMemory:
    """Open a consumer's slab in a worker without registering it with the resource tracker."""
    register = resource_tracker.register
    resource_tracker.register = lambda *args, **kwargs: None
    try:
        return shared_memory.SharedMemory(name=name)
    finally:
        resource_tracker.register = register


def _big(x) -> bool:
    return type(x) is np.ndarray and x.nbytes >= MIN_SHM_BYTES and x.dtype != object


def pack_leaves(leaves: list, buf, start: int = 0):
    """Write big array leaves into ``buf`` (a memoryview) from ``start``; returns (new leaves, end offset),
    or (None, bytes needed) when they do not fit (``buf`` None counts as no room)."""
    offset = start
    plan = []
    for x in leaves:
        if _big(x):
            offset = _round_up(offset, ALIGN)
            plan.append(offset)
            offset += x.nbytes
        else:
            plan.append(None)
    if buf is None or offset > len(buf):
        return None, offset
    out = []
    for x, at in zip(leaves, plan):
        if at is None:
            out.append(x)
            continue
        dst = np.frombuffer(buf, dtype=x.dtype, count=x.size, offset=at).reshape(x.shape)
        np.copyto(dst, x, casting="no")
        out.append(ShmRef(at, x.dtype.str, x.shape))
    return out, offset


def has_big_leaf(leaves: list) -> bool:
    return any(_big(x) for x in leaves)


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
