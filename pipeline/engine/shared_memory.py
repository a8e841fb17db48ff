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
tracker unlinks what is left if the consumer itself is killed. What a block and its results look like in a
slab: ``slab_blocks.py``.
"""

from __future__ import annotations

import itertools
import mmap
import os
import sys
import weakref
from multiprocessing import resource_tracker, shared_memory

import numpy as np

from .slab_blocks import round_up

PREFIX = "jaxfeed_"
_MIN_SLAB = 1 << 20
_counter = itertools.count()

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
            self.size = max(_MIN_SLAB, round_up(int(nbytes * 1.25), 1 << 16))

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


STOP = b"S"  # the message that ends a map worker (``engine/worker.py``); a task is a pickle (never b"S")
FORGET = b"F"  # followed by a pickled list of slab names: the consumer unlinked them, the worker unmaps them
