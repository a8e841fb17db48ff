"""Parallel ``interleave``: worker threads read the slots' inner iterators ahead while the consumer emits
in the slot order of the sequential version (``interleave.py``, which holds the slot model).

- Every slot -- the ``cycle`` current ones and up to ``cycle`` *future* ones (the next input elements,
  opened ahead so that a lazy refill waits neither for ``map_func`` nor for the first read) -- keeps
  ``READ_DEPTH`` (2) reads buffered (a read is ``READ_AHEAD`` = 256 elements, or fewer for large elements
  so that it is about ``READ_BYTES`` = 256 KiB, never below ``block_length``; ``READ_ROWS`` = 1024 rows of a
  generator read as columns under a batch): when its buffer runs below
  that, one read task (``inner.next_many(read)``) is queued for it. Two reads, not one: with one, a slot
  asked for its next read when the consumer was a few batches from needing it, and the consumer caught up
  with the readers and did the reads itself (a 4-file TFRecord read stage: ~20% slower). A slot never has
  two tasks at once (inner iterators are not thread-safe), so elements cross threads a block at a time.
- Opening (``map_func`` and building the inner iterator) runs in the slot's first task. Errors of
  ``map_func`` and of inner iterators sit in the slot's buffer in place; an input error becomes a future
  of its own, raised where the sequential version meets it. The deterministic order therefore equals the
  sequential order, errors included.
- ``deterministic=False``: when the current slot has nothing buffered, the consumer moves to a slot that
  has (or to an empty one while futures wait) instead of waiting. Every element still comes out once.
- ``num_parallel_calls=AUTOTUNE``: how many slots are read at once (reader threads) is tuned by an
  ``autotune.Tuner``: it starts at ``AUTOTUNE_START`` (2; a tuner needs ~0.1 s of windows before its first
  step, and an epoch of a fast read stage can be over by then: with one reader the consumer did a third of
  the reads itself, ~15% slower than with two) and steps down straight to 0 (no reader: the consumer
  reads every slot, ``_reads_here``) if the rate holds there, else one reader at a time while it holds;
  it probes one more per ``autotune.WINDOW`` in which the consumer waited for the current slot (measured
  in ``_await``, which also ticks the tuner while it waits, so a long wait raises it too), keeping a step
  only if the delivery rate rose, up to ``cycle`` (``min(cpu_budget, cycle)`` when
  ``Options.autotune.cpu_budget`` is set); ``Options.autotune.enabled = False`` pins it there.
  Threads beyond a lowered value park between tasks.
- ``num_parallel_calls=AUTOTUNE`` over ``from_generator`` sources: a slot's generator may run in a worker
  process instead (``engine/remote_inner.py``: ``_open_slot``; which generators may move,
  ``engine/worker_safety.py``; the rule, ``executor_choice.interleave_reason``). Once a slot opened there, no
  reader thread runs (``parallelism`` 0): a future slot is opened as soon as it is known, its first reads
  asked there (``_open_ahead``), and the consumer takes each slot's answers where the sequential iterator
  would read it. ``executor_decision`` says where the slots read and why (statistics, ``explain``).
- A slot the consumer waits for whose read is queued but not started is read by the consumer itself
  (the first records come without a thread hand-off, and GIL-bound reads don't leave the consumer idle).
  Parallelism only decides when and where reads happen, never which element comes next: the order is the
  slot model's, whatever the tuner does.
- A *solo* start: when the previous iterator of the same ``Dataset`` (the last epoch) opened its slots
  quickly -- its quickest opening read (``map_func``, the open and the first read) under
  ``SOLO_OPEN_SECONDS`` -- the consumer serves the first ``cycle`` reads' worth of elements (``cycle x read``,
  a read counted at most ``READ_AHEAD``:
  P3's first four batches; after a restore too) alone, reading slots where the sequential iterator would,
  and the readers start at the call after. The first batch then waits for no thread start (``Thread.start``
  waits for the new thread to run: ~1 ms each on a busy machine) and shares the GIL with no reader reading
  ahead (P3's first batch took 3-5x longer with two readers running than without), however the stage above
  asks for it (a whole batch at once, or a process map's doubling blocks). A source whose every open waits
  (a network file system; readers that only finish together) keeps its readers from the first call: an
  iterator without a quick opening read behind it starts them there, as before. Who reads never changes
  which elements come.
- ``get_state`` pauses the workers (queued tasks are dropped, running ones finish), records the input and
  every slot (element, position, inner state, buffered elements), then lets them go on: nothing in flight
  is lost or repeated. ``close`` stops and joins the workers, then closes every inner iterator.
"""

from __future__ import annotations

import collections
import threading
import time

from ..options import effective_deterministic
from ..engine import autotune, executor_choice
from ..engine.executor_choice import Decision
from ..engine.pool import stage_threads
from ..engine.remote_inner import RemoteOpener
from ..engine.thread_start import join_started, start_soon
from .base import finalizing
from .flat_map import inner_dataset
from .interleave import READ_AHEAD, Slot, SlotCycle

JOIN_TIMEOUT = 30
REMOTE_POLL_SECONDS = 0.05  # deterministic=False, slots in workers: the longest wait for any worker's answer
# before the slots are looked at again (an answer from workers replaced after a death wakes no one)
AUTOTUNE_START = 2  # reader threads an AUTOTUNE interleave starts with (see the module doc)
READ_DEPTH = 2  # reads a slot keeps buffered (see the module doc)
SOLO_OPEN_SECONDS = 0.005  # an opening read this quick lets the next iterator start solo (see the module
# doc): a local file opens and gives its first records in ~0.2 ms, a network one in tens of ms


class ParallelInterleaveIterator(SlotCycle):
    clock = staticmethod(time.perf_counter)  # the tuner's clock (tests put a fake one here)

    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.deterministic = effective_deterministic(ctx.options, node.deterministic)
        npc = node.num_parallel_calls
        self._tuner = None
        if npc > 0:
            self.workers = npc
        else:  # AUTOTUNE: up to one reader per open slot (readers mostly wait on I/O, as tf.data
            # assumes), within Options.autotune.cpu_budget when the user sets one
            budget = ctx.options.autotune.cpu_budget
            self.workers = stage_threads(ctx, max(1, min(budget, self._cycle) if budget else self._cycle))
            if autotune.enabled(ctx.options):
                # down to 0: no reader, the consumer reads every slot itself (``_reads_here``)
                # down first: AUTOTUNE_START is generous, and readers whose reads hold the GIL (local files:
                # TFRecord framing, a Python generator) make the consumer wait although fewer would do better
                self._tuner = autotune.tuner_for(node, ctx, AUTOTUNE_START, self.workers, clock=self.clock,
                                                 minimum=0, down_first=True)
        self._max_threads = stage_threads(ctx, self.workers)  # Options.threading.private_threadpool_size
        # AUTOTUNE: slots whose inner datasets run Python per element may open in worker processes
        self._remote = None
        self._static_reason = None  # why every slot stays here (AUTOTUNE only; explain)
        if npc < 0:
            self._static_reason = executor_choice.interleave_reason(node, ctx)
            if self._static_reason is None:
                last = executor_choice.remembered(ctx, node)  # (its slots went to workers: open ahead at once)
                self._remote = RemoteOpener(min(ctx.cpu_count, self._cycle),  # workers: no more than slots
                                            known=last is not None and last.executor == "process")
        self._futures: collections.deque = collections.deque()
        self._lock = threading.Lock()
        self._task_ready = threading.Condition(self._lock)  # workers wait here
        self._data_ready = threading.Condition(self._lock)  # the consumer (and get_state) waits here
        self._tasks: collections.deque = collections.deque()
        self._threads: list = []
        self._running = 0  # read tasks running on worker threads
        self._warm = False  # the first call returned: all future slots may read ahead (before, only those
        # that fill the cycle: the first elements come sooner when readers spend the GIL on their slots only)
        self._paused = False
        self._closed = False
        # A solo start (see the module doc): where this Dataset's iterators note whether their opens were quick
        learned = autotune.learned_slot(ctx, node)
        self._quick_opens = None if learned is None else (learned[0], learned[1] + ("quick_opens",))
        self._solo = self._opens_were_quick()
        self._served = 0  # elements (and rows) delivered by the consumer alone, for the solo start
        self._quickest_open = float("inf")

    @property
    def executor_decision(self) -> Decision | None:
        """Where AUTOTUNE's slots read (statistics, ``explain``); None for a fixed ``num_parallel_calls``."""
        if self._remote is None:
            return None if self._static_reason is None else Decision("thread", self._static_reason)
        if self._remote.opened:
            return Decision("process", f"from_generator inner datasets run Python per element, holding the GIL: "
                                       f"{self._remote.opened} slots read in worker processes")
        return Decision("thread", self._remote.reason or "no slot opened yet")

    def _open_slot(self, node, ctx, element, position):
        """A slot's inner iterator: in a worker process where ``_remote`` takes the dataset, else here."""
        dataset = inner_dataset(node, element, position, "interleave")
        remote = self._remote.open(dataset, ctx, position)
        return remote if remote is not None else ctx.build(dataset)

    @property
    def parallelism(self) -> int:
        """Reader threads allowed now: the tuned value under AUTOTUNE, else ``workers``; none once slots read
        in worker processes (the consumer asks their reads ahead and takes the answers where the sequential
        iterator would read: a reader thread would only add a hand-off)."""
        if self._tuner is None:
            return self.workers
        return 0 if self._remote_reads() else self._tuner.value

    def _remote_reads(self) -> bool:
        return self._remote is not None and self._remote.opened > 0

    # ------------------------------------------------------------------ workers
    def _start(self):
        with self._lock:
            for slot in self._all_slots():  # restored slots read ahead again
                self._schedule(slot)
        self._spawn()

    def _spawn(self):
        """Start reader threads up to ``parallelism`` (consumer thread). Threads are never stopped before
        ``close``: a lowered value parks them between tasks. They start on the starter thread
        (``thread_start``): until they run, the consumer reads the queued slots itself (``_await``)."""
        while len(self._threads) < min(self.parallelism, self._max_threads) and not self._closed:
            t = threading.Thread(target=self._work, name=f"jaxfeed-interleave-{len(self._threads)}", daemon=True)
            start_soon(t)
            self._threads.append(t)

    def _tick(self, delivered=0, locked=False):
        """AUTOTUNE: let the tuner judge the window; more readers if it rose (consumer thread; ``locked``:
        the caller holds the lock)."""
        before = self.parallelism
        if not self._remote_reads():
            self._tuner.tick(delivered)
        if len(self._threads) < self.parallelism:
            if not self._threads and not locked:  # readers again after none: the slots' reads queue first
                self._start()
            else:
                self._spawn()
        if self.parallelism > before:  # wake readers parked by a lower value
            if locked:
                self._task_ready.notify_all()
            else:
                with self._lock:
                    self._task_ready.notify_all()

    def _work(self):
        while True:
            with self._lock:
                while (not self._tasks or self._running >= self.parallelism) and not self._closed:
                    self._task_ready.wait()
                if self._closed:
                    return
                slot = self._tasks.popleft()
                self._running += 1
            items, ended = self._timed_read(slot)
            self._adapt(items)
            with self._lock:
                self._running -= 1
                slot.add(items, ended)
                slot.busy = False
                self._schedule(slot)
                self._task_ready.notify()
                self._data_ready.notify_all()

    def _opens_were_quick(self) -> bool:
        """Whether the last iterator of this Dataset had a quick opening read (it may start solo)."""
        return self._quick_opens is not None and self._quick_opens[0].get(self._quick_opens[1]) is True

    def _timed_read(self, slot: Slot):
        """``slot.read`` (outside the lock); an opening read's time tells the next iterator whether it may
        start solo."""
        opener = None if self._remote is None else self._open_slot
        if slot.iterator is not None or self._quick_opens is None:
            return slot.read(self.node, self.ctx, self._read, self._stacked, opener)
        t0 = self.clock()
        result = slot.read(self.node, self.ctx, self._read, self._stacked, opener)
        seconds = self.clock() - t0
        if seconds < self._quickest_open:  # (a race between readers only loses a slower time)
            self._quickest_open = seconds
            store, key = self._quick_opens
            store[key] = seconds < SOLO_OPEN_SECONDS
        return result

    def _schedule(self, slot: Slot):
        """Queue a read for ``slot`` if it wants one (lock held)."""
        if (not slot.busy and not slot.ended and not self._paused and not self._closed
                and slot.held() < self._read * READ_DEPTH):
            slot.busy = True
            self._tasks.append(slot)
            self._task_ready.notify()

    # ------------------------------------------------------------------ slot model hooks
    def _top_up(self):
        """Open future slots for up to ``cycle`` next input elements (consumer thread)."""
        want = self._cycle - len(self._futures)
        if want <= 0 or self._input_done:
            return
        try:
            block = self.input.next_many(want)
        except Exception as e:  # noqa: BLE001 - raised where the sequential version would meet it
            failed = Slot(None, self._position)
            failed.input_error = e
            failed.ended = True
            self._futures.append(failed)
            return
        if not block:
            self._input_done = True
            return
        with self._lock:
            empty = sum(s is None for s in self._slots)  # futures that will fill the cycle's empty slots
            for element in block:
                slot = Slot(element, self._position)
                self._position += 1
                self._futures.append(slot)
                if self._remote is not None and self._remote.may_open() and self._open_ahead(slot):
                    continue  # opened in a worker, which reads ahead while the cycle gets to it
                if self._warm or len(self._futures) <= empty:
                    self._schedule(slot)

    def _open_ahead(self, slot: Slot) -> bool:
        """Open a future slot now, on the consumer's thread (lock held; not one a reader has), and ask its
        first reads where it opened in a worker: True then."""
        if slot.busy:
            return False
        slot.open_ahead(self.node, self.ctx, self._open_slot)
        if getattr(slot.iterator, "remote", False):
            slot.iterator.ask(self._read, self._stacked)
            return True
        return False

    def _refill_slot(self):
        if not self._futures:
            self._top_up()
            if not self._futures:
                return None
        slot = self._futures.popleft()
        if slot.input_error is not None:  # the slot stays empty, the cycle stays here
            raise slot.input_error
        self._top_up()
        return slot

    def _await(self, slot, have_output):
        while not slot.held() and not slot.ended:
            if self._closed:
                return False
            seen = self._answer_pending(slot)  # not None: deterministic=False, and the slot's worker has not
            # answered its next read yet (the consumer may take another slot meanwhile)
            if slot.held() or slot.ended:  # (opened just now, and its open failed: the error is in its place)
                continue
            if seen is None and (not self._threads or (not self.deterministic and self._answer_in(slot))):
                self._read_here(slot)  # a solo start's call, or slots in workers: read here, where the sequential
                continue  # iterator would (a worker's answer taken; deterministic=False: one that is in)
            if have_output:
                return False
            if not self.deterministic and self._switch_to_ready():
                return True
            if seen is not None:
                self._wait_for_answer(slot, seen)
                continue
            self._schedule(slot)
            if slot.busy and slot in self._tasks:  # queued, not started: the consumer reads it itself
                self._read_here(slot)
                continue
            self._wait_for_reads()
        return True

    def _answer_pending(self, slot):
        """deterministic=False where slots may read in workers (lock held): None when reading ``slot`` now would
        not wait for a worker (it holds an answer, reads here, or a reader thread has it), else how many answers
        its workers had given before the check (for ``_wait_for_answer``). A slot not opened yet (queued for a
        reader or not) is opened now, as ``_top_up`` opens a future: read by the consumer, a slot that opened in
        a worker waited there for its first answer (all of a generator held up in that worker)."""
        if self.deterministic or self._remote is None or slot.ended or self._reader_has(slot):
            return None
        if slot.iterator is None:
            if not self._remote.may_open():
                return None
            slot.open_ahead(self.node, self.ctx, self._open_slot)  # (not started by a reader: nothing races it)
        it = slot.iterator
        if not getattr(it, "remote", False):
            return None
        seen = it.answers_seen()
        return None if it.answered(self._read, self._stacked) else seen

    def _answer_in(self, slot) -> bool:
        """Whether ``slot`` reads in a worker whose answer to its next read is in (lock held)."""
        it = slot.iterator
        return getattr(it, "remote", False) and not self._reader_has(slot) and it.answered(self._read, self._stacked)

    def _reader_has(self, slot) -> bool:
        """Whether a reader thread runs ``slot``'s read (slots read here before, or while, the first opened in a
        worker): busy, and not queued (lock held)."""
        return slot.busy and slot not in self._tasks

    def _wait_for_answer(self, slot, seen: int) -> None:
        """Wait (lock released meanwhile) for the next answer of any worker after the ``seen`` first."""
        self._lock.release()
        try:
            slot.iterator.wait_any(seen, REMOTE_POLL_SECONDS)
        finally:
            self._lock.acquire()

    def _wait_for_reads(self):
        """Wait (lock held) until a reader delivers."""
        if self._tuner is None:
            self._data_ready.wait()
        else:  # measure the wait; tick while waiting so that a long wait raises parallelism too
            t0 = self.clock()
            self._data_ready.wait(autotune.WINDOW)
            self._tuner.waited(self.clock() - t0)
            self._tick(locked=True)

    def _read_here(self, slot):
        """Run ``slot``'s read on the consumer thread: its queued one, or (a solo start: no reader runs) a
        new one. The lock is held on entry and exit, not during."""
        if slot.busy:
            self._tasks.remove(slot)
        slot.busy = True
        # time the consumer spends reading counts as waiting for this stage: readers' lag, or (AUTOTUNE at 0)
        # the reads themselves, so that a reader is probed again; a solo start's reads are neither
        timed = self._tuner is not None and (bool(self._threads) or not self._alone())
        t0 = self.clock() if timed else 0.0
        self._lock.release()
        try:
            items, ended = self._timed_read(slot)
        except BaseException:  # a Ctrl-C raised inside the read (engine.interrupts): it reads again next call
            self._lock.acquire()
            slot.busy = False
            self._data_ready.notify_all()
            raise
        self._lock.acquire()
        self._adapt(items)
        slot.add(items, ended)
        slot.busy = False
        self._schedule(slot)
        self._data_ready.notify_all()  # get_state may be waiting for busy slots
        if timed:  # time the consumer spent on this stage's work: as good as waiting
            self._tuner.waited(self.clock() - t0)

    def _short(self, slot, need):
        """Before a weave (lock held): a short slot whose read is queued but not started is read here now, as
        ``_await`` would when the consumer reached it; one a reader is running is left to finish. A solo start
        (or slots in workers) reads it up to ``need``, as the sequential iterator does -- with
        deterministic=False only while its worker's answers are in."""
        if self._answer_pending(slot) is not None:
            return
        if not self._threads:
            while slot.held() < need and not slot.ended and not slot.failures and not self._closed:
                self._read_here(slot)
                if self._answer_pending(slot) is not None:
                    return
        elif slot.busy and slot in self._tasks:
            self._read_here(slot)

    def _fill_for_columns(self, slot, need):
        """Before a batch's check of the slots (lock held): a short slot's queued reads are made here, and one a
        reader is running is waited for. The batch needs those rows either way; without the wait the element
        way took the rows the slot already held (a first read's few, of every slot: a batch's worth of rows) as
        elements, for the batch to stack again, whenever the check came while a reader was still reading."""
        while True:
            self._short(slot, need)
            if (slot.columns.rows >= need or slot.buffer or slot.ended or slot.failures or not slot.busy
                    or self._closed or not self.deterministic):
                return  # (deterministic=False: the element way may take another slot instead of waiting)
            if slot not in self._tasks:
                self._wait_for_reads()

    def _switch_to_ready(self) -> bool:
        """deterministic=False: make a slot that can give something now the current one (lock held): one that
        holds elements, has ended or (slots in workers) whose worker's answer is in."""
        for j in range(1, self._cycle):
            i = (self._c + j) % self._cycle
            slot = self._slots[i]
            if (slot is not None and (slot.held() or slot.ended or self._answer_in(slot))) or (
                    slot is None and self._futures):
                self._c, self._b = i, 0
                return True
        return False

    def _consumed(self, slot):
        self._schedule(slot)

    def start_ahead(self):
        """Start the readers and open the first slots now (as the first call would)."""
        if not self._closed and not self._threads:
            self._start()
            self._top_up()

    def _alone(self) -> bool:
        """Whether this call is served by the consumer alone: a solo start (see the module doc) whose
        ``cycle`` reads' worth of elements are not all delivered yet."""
        # (reads of stacked rows are longer, ``interleave.READ_ROWS``: the solo start still lasts READ_AHEAD-sized
        # reads, the first batches' worth; what comes after is no first batch)
        return not self._threads and self._solo and self._served < self._cycle * min(self._read, READ_AHEAD)

    def _reads_here(self) -> bool:
        """No reader runs and none is wanted: AUTOTUNE stepped down to 0 (the reads of a stage whose reads
        hold the GIL -- TFRecord framing and CRCs of local files -- cost less on the consumer than handed to a
        thread: P3's read stage took 594 ns of CPU a record read sequentially, 1,035 with two readers). The
        consumer reads each slot where the sequential iterator would, as in a solo start."""
        return not self._threads and self.parallelism == 0

    def _next_many(self, n):
        if self._closed:
            return []
        solo = self._alone()
        if not self._threads and not solo and not self._reads_here():
            self._start()
        self._top_up()
        out = super()._next_many(n)
        if solo:
            self._served += len(out)
        if not self._warm:
            self._warm = True
            with self._lock:
                for slot in self._futures:
                    self._schedule(slot)
        if self._tuner is not None and not solo:  # once per delivered block, as the other AUTOTUNE stages
            self._tick(len(out))
        return out

    def next_rows(self, n):
        """``SlotCycle.next_rows`` after the first call, once the readers run or while a solo start lasts
        (the first elements go by ``next_many``, which starts the readers when it is their turn)."""
        solo = self._alone()
        if self._closed or not (self._threads or solo or self._reads_here()) or not self._warm:
            self._stacked = True
            return None, -1
        self._top_up()
        rows, k = super().next_rows(n)
        if solo:
            self._served += max(k, 0)
        elif self._tuner is not None and k > 0:
            self._tick(k)
        return rows, k

    # ------------------------------------------------------------------ state
    def _all_slots(self) -> list:
        return self._open_slots() + list(self._futures)

    def children(self):
        return super().children() + [s.iterator for s in self._futures if s.iterator is not None]

    def get_state(self):
        try:
            with self._lock:
                self._paused = True
                for slot in self._tasks:  # queued, not started: drop them
                    slot.busy = False
                self._tasks.clear()
                while any(s.busy for s in self._all_slots()):
                    self._data_ready.wait()
            state = super().get_state()
            state["futures"] = [s.state() for s in self._futures]
            return state
        finally:
            with self._lock:
                self._paused = False
                for slot in self._all_slots():
                    self._schedule(slot)

    def set_state(self, state):
        self._stop_workers()
        for slot in list(self._futures):
            slot.close()
        super().set_state(state)
        self._futures = collections.deque(Slot.restored(s) for s in state["futures"])
        self._closed = False
        # the first calls after a restore make a first batch too
        self._solo = self._opens_were_quick()
        self._served = 0

    # ------------------------------------------------------------------ lifetime
    def _stop_workers(self):
        if finalizing():  # no lock, no join: a reader stopped for good may hold the lock (base.finalizing)
            self._closed = True
            self._threads = []
            return
        with self._lock:
            self._closed = True
            self._tasks.clear()
            self._task_ready.notify_all()
            self._data_ready.notify_all()
        for t in self._threads:
            if t is not threading.current_thread():
                join_started(t, timeout=JOIN_TIMEOUT)
        self._threads = []

    def close(self):
        decision = self.executor_decision
        if decision is not None and not self._closed:  # for ``Dataset.explain``
            executor_choice.remember(self.ctx, self.node, decision)
        if self._tuner is not None:
            self._tuner.close()
        self._stop_workers()
        for slot in self._all_slots():
            slot.close()
        super().close()
