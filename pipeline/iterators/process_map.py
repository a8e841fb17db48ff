"""Parallel ``map`` in worker processes, for functions that hold the GIL (pure-Python parsing, tokenising).

- Workers start at the first ``next`` (forkserver, so a process with threads is never forked), one pipe
  each, and receive the cloudpickled function once. Tasks are blocks of input elements, sized so one
  task takes about ``TARGET_TASK_SECONDS`` (a pipe round trip costs ~100 us); each worker holds at most
  ``DEPTH`` tasks. A map that AUTOTUNE moved here from threads (``iterators/chosen_map.py``) starts its
  workers on a thread of their own instead (``start_in_background``) and maps on the consumer's thread
  until they are up.
- Big numpy arrays cross in shared memory (``engine/shared_memory.py``, the slabs; ``engine/slab_blocks.py``,
  what is written in them): a task's input columns of like arrays
  stacked into an input slab (the worker copies them out), its results stacked by the worker straight
  into a result slab and handed out where they lie (``SlabPool.hand_out``: the slab is lent again once nothing
  views it; past the budget, copied out). The rest is pickled. A block of half a batch or more ends on a
  batch boundary (``_sized``), so a batch above is one worker's block, and a task's results stay under
  ``TASK_BYTES``. (P4 as ported, explicit ``executor="process"``: 11-14k img/s with pickled inputs and results
  copied out, against 22-26k on two threads; 26.9k now, threads 26.6k in the same run. A function that holds
  the GIL over 48 KB results -- 27 us a call -- 44k img/s in processes, 32k on two threads, 47k the one-thread
  hand loop.)
- Pools outlive iterators: one that ran to its end (every task answered) is kept idle (``_Pool.retire``,
  ``KEEP_IDLE`` at most) and serves the next iterator of the same pickled function and code (its module's
  file, and those of the modules it imports, unchanged) with the same working directory and environment
  (``open_pool``); starting workers
  (30-100 ms) and faulting in new slabs cost every epoch ~10-15% before. ``close_idle_pools`` (also at exit)
  stops them; a forked child forgets them. An idle pool keeps its slabs only while idle pools hold at most
  ``1/IDLE_SHM_SHARE`` of /dev/shm (P4's held ~50 MB: most of a container's 64 MB, taken from every other
  program there); past that it drops them, and unlinks those the user still holds (freed with their views).
- Failures in the function arrive in their element's slot, with their type. A worker that dies is noticed
  while waiting (its process sentinel is waited on with the pipes): ``WorkerDiedError`` names it.
- ``num_parallel_calls=AUTOTUNE`` starts one worker per CPU of ``Options.autotune.cpu_budget`` (or
  ``execution.num_workers``, which pins the count) and an ``autotune.Tuner`` decides how many of them get
  tasks: all at first (a function that holds the GIL is why one uses processes), a step down probed and
  kept if the delivery rate holds without it -- a consumer with heavy work of its own on a small machine
  -- and a step back up while the consumer waits for results. Processes are not started or stopped as it
  moves: a worker left out finishes its tasks and idles.
- ``get_state`` waits for the tasks in flight and keeps their results in the state (nothing lost or
  repeated). ``close`` -- also run by the context, by ``weakref.finalize`` on garbage collection and at
  interpreter exit -- retires the pool: kept when every task was answered, else its workers stopped and
  every slab unlinked (answers still due would reach the next iterator).
"""

from __future__ import annotations

import atexit
import collections
import itertools
import logging
import os
import pickle
import queue
import threading
import time
import weakref
from multiprocessing import connection

from .. import structure
from ..errors import InvalidArgumentError, WorkerDiedError
from ..options import effective_deterministic
from ..engine import autotune
from ..engine.pool import thread_cap
from ..engine.blocks import Delivery, DeliveringIterator, Failure, StackedDelivery, apply_block
from .base import count_held, finalizing
from .map import HandedOverByProbe, node_seeds, rng_factory
from ..engine import code_stamps
from ..engine.shared_memory import FORGET, STOP, SlabPool, handout_budget, shm_size
from ..engine.slab_blocks import Columns, SlabWriter, pack_block, unpack_leaves
from ..engine.worker import STACKED
from ..engine.processes import mp_context, start_without_main, worker_reason
from ..engine.processes import stop as stop_processes

log = logging.getLogger("jaxfeed")

TARGET_TASK_SECONDS = 0.008  # per task: the consumer's cost per task (pickle the block, receive, restore) is
# CPU the workers lack on a small machine; 8 ms tasks made P5 ~10% faster than 4 ms on 2 cores (16 ms: no better)
MAX_BLOCK = 1024
# Results (and inputs) of a task in shared memory at most: a slab is faulted in once per worker and reused, and
# the smaller the slabs the fewer pages that costs (P4's 48 KB results, 30 us calls: tasks of 266 elements took
# 13-16 MB slabs, half of an epoch's results went through slabs new to the worker)
TASK_BYTES = 8 << 20
DEPTH = 2  # tasks in flight per worker: one running, one queued behind it
HERE_SECONDS = 0.002  # a block mapped on the consumer's thread while the workers start (start_in_background)
YIELD_SECONDS = 0.0002  # ...and between two such blocks, a wait on the starting thread that lets it have the GIL:
# a consumer mapping pure Python gives the GIL up only when the switch interval (5 ms) makes it, and starting
# the workers takes the GIL back after each of its many system calls -- P5's starts took 100-300 ms that way,
# as long as a whole epoch, which then ran on the consumer alone (10-50 ms with the waits)
POLL_SECONDS = 0.5  # how often a waiting consumer re-checks that its workers live
JOIN_SECONDS = 2.0
STOP_SECONDS = 0.1

class _Task:
    __slots__ = ("id", "worker", "position", "size", "slab", "inbox", "result")

    def __init__(self, task_id, worker, position, size, slab, result=None, inbox=None):
        self.id, self.worker, self.position, self.size, self.slab = task_id, worker, position, size, slab
        self.inbox = inbox  # the input slab lent with the task (None: its inputs are all in the message)
        self.result = result  # (results, failed, tag) once it arrived


def _send_loop(conn, outbox: queue.SimpleQueue) -> None:
    """Send queued tasks to one worker. Sending happens here, not on the consumer's thread: a task bigger
    than the pipe's buffer blocks until the worker reads it, and the worker may itself be blocked writing
    a result that only the consumer's thread would read -- a deadlock if that thread were the sender."""
    while True:
        message = outbox.get()
        try:
            conn.send_bytes(message)
        except (OSError, ValueError):
            return  # the worker is gone; the consumer learns it from the process sentinel
        if message is STOP:
            return


def open_pool(fn, label: str, n: int) -> "_Pool":
    """Workers for ``fn``: an idle pool an earlier iterator left for the same function (``_Pool.retire``), or
    a new one. The function is pickled either way: a pool is reused only for the very same bytes -- a
    function defined in ``__main__`` or locally is pickled with the values it closes over, and workers
    holding an older copy would run stale values."""
    import cloudpickle

    why_not = worker_reason()
    if why_not is not None:
        raise InvalidArgumentError(f"{label}: executor='process' cannot start its workers: {why_not}. Use "
                                   f"executor='thread' (or num_parallel_calls=AUTOTUNE with no executor, "
                                   f"which stays on threads there).", label)
    try:
        fn_bytes = cloudpickle.dumps(fn)
    except Exception as e:  # noqa: BLE001 - say which function and why, keep the cause
        raise TypeError(f"{label}: executor='process' needs a function cloudpickle can serialise, and "
                        f"{getattr(fn, '__qualname__', fn)!r} is not: {e}") from e
    key = (fn_bytes, code_stamps.signature(fn), label, n)  # (kept workers run the code they imported)
    pool = _take_idle(key)
    return pool if pool is not None else _Pool(fn_bytes, key, n, label)


class _Pool:
    """Processes, pipes, sender threads and slabs: everything ``close`` must release, with no reference to
    the iterator (so ``weakref.finalize`` can run it when the iterator is collected)."""

    def __init__(self, fn_bytes: bytes, key: tuple, n: int, label: str):
        ctx = mp_context()
        self.key = key  # (``open_pool``)
        self.cwd, self.environ = os.getcwd(), dict(os.environ)  # what the workers started with
        self.slabs = SlabPool(n, DEPTH, handout_budget())  # results
        self.inboxes = SlabPool(n, DEPTH)  # the tasks' big input arrays
        self.procs, self.conns, self.outboxes, self.senders = [], [], [], []
        self.closed = False
        self.released = False  # the workers were told to exit (``release``)
        self.unanswered = 0  # tasks sent and not answered: a pool with any is not kept (``retire``)
        try:
            self._start(ctx, fn_bytes, label, n)
        except BaseException:
            self.close()  # workers already started must not outlive a failed start
            raise

    def _start(self, ctx, fn_bytes, label, n):
        from ..engine import worker

        for i in range(n):
            mine, theirs = ctx.Pipe(duplex=True)
            p = ctx.Process(target=worker.main, args=(theirs, fn_bytes, label, dict(os.environ), os.getpid()),
                            daemon=True, name=f"jaxfeed-map-{i}")
            start_without_main(p)
            theirs.close()
            self.procs.append(p)
            self.conns.append(mine)
        self.outboxes = [queue.SimpleQueue() for _ in range(n)]
        self.senders = [threading.Thread(target=_send_loop, args=(conn, box), daemon=True,
                                         name=f"jaxfeed-map-send-{i}")
                        for i, (conn, box) in enumerate(zip(self.conns, self.outboxes))]
        for t in self.senders:
            t.start()

    def send(self, worker: int, message: bytes) -> None:
        self.outboxes[worker].put(message)

    def tell_dropped(self, worker: int) -> None:
        """Tell ``worker`` which of its slabs were unlinked since it last heard: it unmaps them (a worker keeps
        up to ``MAX_ATTACHED`` mapped, and an unlinked slab's memory stays in use while anyone maps it)."""
        names = self.slabs.take_dropped(worker) + self.inboxes.take_dropped(worker)
        if names:
            self.send(worker, FORGET + pickle.dumps(names, protocol=5))

    def release(self) -> None:
        """Tell the workers to exit after their tasks (the stop is sent behind them): no more will come."""
        if not self.released:
            self.released = True
            for box in self.outboxes:
                box.put(STOP)

    def retire(self) -> None:
        """The iterator is done with the pool: kept for the next iterator of the same function when every
        task was answered (``KEEP_IDLE`` pools at most, the oldest closed), else closed."""
        if self.closed:
            return
        if self.released or self.unanswered or finalizing() or not self.alive():
            self.close()
            return
        size = shm_size()  # trimmed before it is idle: once there another iterator may take it
        with _IDLE_LOCK:  # (an idle pool of the same key is replaced by this one: not counted)
            held = self.held_bytes() + sum(p.held_bytes() for key, p in _IDLE.items() if key != self.key)
        if size is not None and held > size // IDLE_SHM_SHARE:  # (a container's /dev/shm is often 64 MB)
            self.slabs.trim()
            self.inboxes.trim()
        for w in range(len(self.procs)):
            self.tell_dropped(w)
        with _IDLE_LOCK:
            evicted = [_IDLE.pop(self.key, None)]
            _IDLE[self.key] = self
            while len(_IDLE) > KEEP_IDLE:
                evicted.append(_IDLE.popitem(last=False)[1])
        for pool in evicted:
            if pool is not None and pool is not self:
                pool.close()

    def held_bytes(self) -> int:
        """Bytes of /dev/shm the pool's own slabs hold."""
        return self.slabs.held_bytes() + self.inboxes.held_bytes()

    def alive(self) -> bool:
        return all(p.is_alive() for p in self.procs)

    def reusable(self) -> bool:
        """Whether a kept pool may serve a new iterator: its workers live and started in the working
        directory and environment the consumer has now (a notebook's ``%cd``, an ``os.environ`` change)."""
        return not self.closed and self.alive() and os.getcwd() == self.cwd and dict(os.environ) == self.environ

    def close(self):
        if self.closed:
            return
        self.closed = True
        self.release()
        stop_processes(self.procs, STOP_SECONDS, JOIN_SECONDS)
        for conn in self.conns:  # a sender still blocked on a dead worker's pipe fails and exits
            conn.close()
        for t in self.senders:
            t.join(JOIN_SECONDS)
        self.slabs.close()
        self.inboxes.close()


KEEP_IDLE = 2  # pools kept between iterators, at most (each: its workers and their slabs)
IDLE_SHM_SHARE = 16  # idle pools keep their slabs while these hold at most this share of /dev/shm's size; past
# it a retiring pool drops its own (the next epoch makes new ones: a few ms of page faults)
_IDLE: "collections.OrderedDict[tuple, _Pool]" = collections.OrderedDict()  # by ``open_pool``'s key
_IDLE_LOCK = threading.RLock()  # (re-entrant: a finalizer run by the garbage collector may retire a pool)


def _take_idle(key) -> _Pool | None:
    with _IDLE_LOCK:
        pool = _IDLE.pop(key, None)
    if pool is not None and not pool.reusable():
        pool.close()
        return None
    return pool


def close_idle_pools() -> None:
    """Stop the workers kept between iterators (also run at interpreter exit)."""
    with _IDLE_LOCK:
        pools = list(_IDLE.values())
        _IDLE.clear()
    for pool in pools:
        pool.close()


def _forget_in_child() -> None:
    """A forked child does not own its parent's workers: it forgets them (never stops them)."""
    global _IDLE_LOCK
    _IDLE_LOCK = threading.RLock()
    _IDLE.clear()


atexit.register(close_idle_pools)
os.register_at_fork(after_in_child=_forget_in_child)


class _Starting:
    """Worker processes being started on a thread of their own (``start_in_background``) while the consumer
    maps on its own thread. It holds no reference to the iterator, so a finalizer can wait for it and close
    what it started."""

    def __init__(self, fn, label: str, n: int):
        self.pool, self.error = None, None
        self.thread = threading.Thread(target=self._run, args=(fn, label, n), name="jaxfeed-map-start",
                                       daemon=True)
        self.thread.start()

    def _run(self, fn, label, n):
        try:
            self.pool = open_pool(fn, label, n)
        except BaseException as e:  # noqa: BLE001 - raised on the consumer's thread by take()
            self.error = e

    def started(self) -> bool:
        return not self.thread.is_alive()

    def let_run(self, seconds: float) -> None:
        """Wait up to ``seconds`` for the start (the caller gives up the GIL meanwhile)."""
        self.thread.join(seconds)

    def take(self) -> _Pool:
        """The started pool (waiting for it); the start's error, if it failed."""
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.pool

    def discard(self) -> None:
        """Wait for the start, then stop what it started (never while the interpreter finalizes: the
        thread may be stopped for good, see ``base.finalizing``)."""
        if finalizing():
            return
        self.thread.join()
        if self.pool is not None:
            self.pool.close()


class ProcessMapIterator(HandedOverByProbe, DeliveringIterator):
    stacks_rows = True  # workers stack failure-free blocks (worker.STACKED)
    # The tuner's clock, also timing the consumer's waits it is told about: tests put a fake one here, so
    # that what the tuner decides never depends on the machine's speed or load.
    clock = staticmethod(time.perf_counter)

    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        self._label = node.label()
        self.deterministic = effective_deterministic(ctx.options, node.deterministic)
        npc = node.num_parallel_calls
        self.workers = npc if npc and npc > 0 else (ctx.options.execution.num_workers or ctx.cpu_count)
        if thread_cap(ctx) is not None:  # not silently: the cap is about threads, these are processes
            log.warning("%s: Options.threading.private_threadpool_size limits threads; this map runs in %d "
                        "worker processes (set num_parallel_calls or Options.execution.num_workers to limit "
                        "them)", self._label, self.workers)
        self._tuner = None  # AUTOTUNE: how many workers get tasks (see the module doc)
        if npc < 0 and not ctx.options.execution.num_workers and autotune.enabled(ctx.options):
            self._tuner = autotune.tuner_for(node, ctx, self.workers, self.workers, clock=self.clock)
        # Workers stack a failure-free block of like elements into one batch: one pickled array per leaf
        # instead of one per element (unpickling small arrays costs ~4 us each).
        self._stack = True
        self._pool: _Pool | None = None
        self._finalizer = None
        self._inflight: collections.deque = collections.deque()
        self._by_id: dict = {}
        self._load = [0] * self.workers
        self._ids = itertools.count()
        self._ready = Delivery()
        self._position = 0
        self._input_done = False
        self._block = 8  # adapted from the per-element time workers report
        self._input_bytes = 0.0  # bytes an input element puts into a task's input slab (0: none)
        # Under a batch of this many rows (``iterators/chosen_map.py`` sets it), tasks end on batch boundaries:
        # the batch then takes each batch as a view of one worker's stacked block instead of joining pieces of
        # two (a concatenate per leaf: ~0.35 us a line of P5 on the consumer, a third of its share).
        self.rows_per_batch = 1
        self._seeds = node_seeds(node)
        self._dead: WorkerDiedError | None = None
        self.work_seconds = 0.0  # function time measured in the workers (statistics)
        self._starting: _Starting | None = None  # see start_in_background
        self._here_block = 1  # elements mapped on the consumer's thread at a time while the workers start

    # ------------------------------------------------------------------ workers
    def _start(self):
        if self._starting is not None:  # started in the background: wait for it to finish
            starting, self._starting = self._starting, None
            self._finalizer.detach()
            self._finalizer = None
            try:
                self._pool = starting.take()
            except BaseException:
                starting.discard()
                raise
        else:
            self._pool = open_pool(self.node.map_func, self._label, self.workers)
        self._finalizer = weakref.finalize(self, _Pool.retire, self._pool)
        self.ctx.on_close(self._finalizer)

    def start_in_background(self) -> None:
        """Start the workers on a thread of their own (30 ms, 0.5 s the first time: a forkserver starts):
        until they are up, blocks are mapped on the consumer's thread, in order, instead of waiting for them.
        For a map that AUTOTUNE moved to processes (``iterators/chosen_map.py``), which was running on this
        process's threads a moment ago; an explicit ``executor="process"`` runs every call in a worker."""
        if self._pool is None and self._starting is None:
            self._starting = _Starting(self.node.map_func, self._label, self.workers)
            self._finalizer = weakref.finalize(self, _Starting.discard, self._starting)
            self.ctx.on_close(self._finalizer)

    def _map_here(self) -> bool:
        """Map the next block on this thread (the workers are still starting); False at the input's end."""
        self._starting.let_run(YIELD_SECONDS)
        try:
            block = self.input.next_many(self._here_block)
        except Exception as e:  # noqa: BLE001 - an upstream error is delivered in its place
            self._ready = Delivery([Failure(e)], True)
            return True
        if not block:
            self._input_done = True
            return False
        t0 = time.perf_counter()
        results, failed = apply_block(self.node.map_func, block, type(block[0]) is tuple, self._label,
                                      self._position, rng_factory(self._seeds, self.ctx.iteration))
        seconds = time.perf_counter() - t0
        self.work_seconds += seconds
        self._here_block = max(1, min(MAX_BLOCK, int(HERE_SECONDS * len(block) / max(seconds, 1e-9))))
        self._position += len(block)
        self._ready = Delivery(results, failed)
        return True

    def _fill(self):
        if self._pool is None:
            self._start()
        while not self._input_done and len(self._inflight) < DEPTH * self.parallelism:
            try:
                block = self.input.next_many(self._sized(self._block))
            except Exception as e:  # noqa: BLE001 - an upstream error is delivered in its place
                self._inflight.append(_Task(-1, -1, self._position, 0, None, ([Failure(e)], True, None)))
                continue
            if not block:
                self._input_done = True
                break
            self._submit(block)

    def _sized(self, n: int) -> int:
        """About ``n`` elements, so many that the block ends on a multiple of ``rows_per_batch`` input
        positions (the map keeps positions: the batches above start there, until an error shifts them). A
        short read or a restored state starting mid-batch is made up by the next block. A block of half a
        batch or more grows to the batch's end (a task of at most ~2 x ``TARGET_TASK_SECONDS``): a batch made
        of two workers' blocks costs a concatenate per leaf -- for P4's images (48 KB each) ~4 us an image on
        the consumer, whose every microsecond the workers lack on 2 cores. Smaller blocks stay as they are:
        the first one (8 elements, to learn the time per call), and those of a slow function, whose batches
        are better made by several workers at once."""
        size = self.rows_per_batch
        if size <= 1 or 2 * n < size:
            return n
        end = max((self._position + n) // size, self._position // size + 1) * size
        return end - self._position

    def _submit(self, block):
        w = min(range(self.parallelism), key=self._load.__getitem__)
        pool = self._pool
        slab = pool.slabs.lend(w)
        inbox = pool.inboxes.lend(w)
        pool.tell_dropped(w)  # (before the task: the slabs it replaced)
        task = _Task(next(self._ids), w, self._position, len(block), slab, inbox=inbox)
        writer = SlabWriter(pool.inboxes.buffer(inbox))
        packed = pack_block(block, writer)
        if writer.offset:
            self._input_bytes = writer.offset / len(block)  # (a block's inputs stay under TASK_BYTES: _accept)
        if writer.short:  # big inputs go in the message: the next tasks' input slabs will hold them, sized for
            # a whole task's at once (each size the pool grows to is new memory; pages never written cost none)
            pool.inboxes.want(int(max(writer.offset, min(TASK_BYTES, self._input_bytes * MAX_BLOCK))))
        if type(packed) is not Columns and inbox is not None:  # nothing in it: lend it again
            pool.inboxes.give_back(inbox)
            task.inbox = inbox = None
        content = (task.id, self._position, packed, type(block[0]) is tuple, slab, inbox, self._seeds,
                   self.ctx.iteration, self._stack)
        pool.send(w, pickle.dumps(content, protocol=5))
        self._position += len(block)
        self._load[w] += 1
        pool.unanswered += 1
        self._inflight.append(task)
        self._by_id[task.id] = task

    def _receive(self, want):
        """Read answers until ``want()`` holds; raise WorkerDiedError when a busy worker has died."""
        pool = self._pool
        while not want():
            busy = [w for w in range(self.workers) if self._load[w]]
            waitables = [pool.conns[w] for w in busy] + [pool.procs[w].sentinel for w in busy]
            ready = connection.wait(waitables, timeout=POLL_SECONDS)
            got_answer = False
            for w in busy:
                if pool.conns[w] in ready:
                    try:
                        message = pool.conns[w].recv_bytes()
                    except (EOFError, OSError):  # it died: wait briefly for its exit code
                        pool.procs[w].join(JOIN_SECONDS)
                        self._worker_died(w)
                    self._accept(w, message)
                    got_answer = True
            if not got_answer:
                for w in busy:
                    if not pool.procs[w].is_alive():
                        self._worker_died(w)

    def _accept(self, w, message):
        answer = pickle.loads(message)
        if answer[0] == "init_error":
            raise answer[1]
        task_id, per_element, slab, used, tag, results = answer
        task = self._by_id.pop(task_id)
        self._load[w] -= 1
        self._pool.unanswered -= 1
        if task.inbox is not None:  # the worker is done with its inputs
            self._pool.inboxes.give_back(task.inbox)
        failed = tag != STACKED and any(type(r) is Failure for r in results)
        if slab is not None or used < 0:
            if used < 0:
                self._pool.slabs.want(-used)
            data = None
            if slab is not None:  # the results view the slab itself while the budget lasts, else a copy
                data = self._pool.slabs.hand_out(slab, used) if used > 0 else None
                if data is None:
                    data = self._pool.slabs.take_back(slab, max(used, 0))
            if used > 0:
                results = [_restore(r, data) for r in results]
        task.result = (results, failed, tag)
        self.work_seconds += per_element * task.size
        if per_element > 0:
            block = int(TARGET_TASK_SECONDS / per_element)
            if used:  # results in shared memory (or that needed it): no more than TASK_BYTES of them a task
                block = min(block, int(TASK_BYTES * task.size / abs(used)))
            if self._input_bytes:  # ... nor of its inputs
                block = min(block, int(TASK_BYTES / self._input_bytes))
            self._block = max(1, min(MAX_BLOCK, block))
            if used:  # slabs for the tasks to come, at once: each size the pool grows to is new memory
                self._pool.slabs.want(int(abs(used) / task.size * self._sized(self._block)))

    def _worker_died(self, w):
        p = self._pool.procs[w]
        for task in self._inflight:
            if task.worker == w and task.result is None:
                if task.slab is not None:
                    self._pool.slabs.forget(task.slab)
                if task.inbox is not None:
                    self._pool.inboxes.forget(task.inbox)
        self._dead = WorkerDiedError(
            f"map worker process {p.pid} died (exit code {p.exitcode}) while running {self._label}; "
            f"{self._load[w]} task(s) were lost.", self._label)
        raise self._dead

    # ------------------------------------------------------------------ delivery
    def _next_task(self) -> _Task:
        if self.deterministic:
            head = self._inflight[0]
            self._receive(lambda: head.result is not None)
            return self._inflight.popleft()
        self._receive(lambda: any(t.result is not None for t in self._inflight))
        task = next(t for t in self._inflight if t.result is not None)
        self._inflight.remove(task)
        return task

    def _refill(self) -> bool:
        if self._dead is not None:
            raise self._dead
        if self._starting is not None and not self._starting.started() and not self._inflight:
            return self._map_here()  # (at the input's end, no need to wait for workers at all)
        self._fill()
        if not self._inflight:
            return False
        t0 = self.clock()
        task = self._next_task()
        if self._tuner is not None:  # the consumer's wait for results: the signal that more workers may pay
            self._tuner.waited(self.clock() - t0)
            self._tuner.tick(task.size)
        results, failed, tag = task.result
        if tag == STACKED:  # kept stacked: a batch above takes row slices (next_rows)
            self._ready = StackedDelivery(results[0])
        else:
            self._ready = Delivery(results, failed)
        self._fill()
        return True

    def buffer_fill(self) -> float:
        return len(self._inflight) / (DEPTH * self.parallelism)

    @property
    def parallelism(self) -> int:
        """Workers given tasks now: the tuned value under AUTOTUNE, else all of them."""
        return self._tuner.value if self._tuner is not None else self.workers

    # ------------------------------------------------------------------ state and lifetime
    def children(self):
        return [self.input]

    def get_state(self):
        if self._dead is not None:
            raise self._dead
        pending = self._ready.remaining()
        if self._inflight:
            self._receive(lambda: all(t.result is not None for t in self._inflight))
        for task in self._inflight:
            results, _, tag = task.result
            if tag == STACKED:
                results = structure.unstack_rows(results[0], structure.batched_len(results[0]))
            pending.extend(results)
        self._inflight.clear()
        self._ready = Delivery.of(pending)
        return {"input": self.input.get_state(), "position": self._position, "ready": pending,
                "input_done": self._input_done, "seeds": self._seeds}

    @staticmethod
    def held(state, weight=None):
        """Results made and not yet delivered, one per input element (``Iterator.held``)."""
        return count_held(state["ready"], weight)

    def set_state(self, state):
        self._shutdown()
        self.input.set_state(state["input"])
        self._position = int(state["position"])
        self._input_done = bool(state["input_done"])
        self._ready = Delivery.of(state["ready"])
        self._seeds = None if state["seeds"] is None else tuple(state["seeds"])

    def _shutdown(self):
        """Stop the workers (answers in flight are dropped with them) and forget the tasks."""
        if self._finalizer is not None:
            self._finalizer()
        self._pool = self._finalizer = self._starting = None
        self._inflight.clear()
        self._by_id.clear()
        self._load = [0] * self.workers
        self._dead = None

    def close(self):
        if self._tuner is not None:
            self._tuner.close()
        self._shutdown()
        super().close()


def _restore(result, data):
    if type(result) is Failure:
        return result
    leaves = structure.flatten(result)
    restored = unpack_leaves(leaves, data)
    return structure.pack_as(result, restored) if structure.is_nested(result) else restored[0]
