"""``prefetch``: a producer thread fills a bounded buffer, pulling blocks of elements from its input.

Saving state is consistent while the producer runs: ``get_state`` takes the input lock (so the producer is
not inside its input), then records the input's state and the buffered elements.

The first call is served on the consumer thread and the producer starts at the second: the first
element comes as soon as the stages below can give it (time to first batch).

AUTOTUNE sizing: the buffer starts at 2 elements and doubles (up to ``MAX_AUTOTUNE`` elements and
``Options.autotune.ram_budget`` bytes, estimated from the first element) when the consumer finds it empty
although the producer had filled it since the last growth: a bursty producer that keeps up on average.
A producer that is simply slower never fills it, and its buffer stays small (see ``autotune.py``).

The pipeline's output prefetch is judged by its consumer (``judge_consumer``, under AUTOTUNE): while the
consumer does next to nothing between calls there is nothing for the thread to overlap with, so the producer
parks and each call reads the input on the consumer's thread (*on demand*); once the consumer works between
calls the producer runs again (``engine/overlap.py``). The input is read under ``_input_lock`` in both modes,
and the producer appends what it read before releasing that lock, so the order is the input's whichever
thread reads.
"""

from __future__ import annotations

import collections
import threading

from ..engine import autotune, overlap
from .base import Iterator, count_held, finalizing
from ..engine.blocks import Failure
from ..engine.thread_start import join_started, start_soon

CHUNK = 64
MAX_AUTOTUNE = 64
_END = object()


class PrefetchIterator(Iterator):
    # For statistics: the consumer's time in a prefetch is waiting for the producer, whose work is
    # counted at the nodes below it; a prefetch does no work of its own worth naming.
    work_seconds = 0.0
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        self._autotune = node.buffer_size < 0 and autotune.enabled(ctx.options)
        self.capacity = 2 if node.buffer_size < 0 else node.buffer_size
        self._buf: collections.deque = collections.deque()
        self._local: collections.deque = collections.deque()  # taken from _buf, served lock-free
        self._cond = threading.Condition()
        self._input_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = False
        self._ended = False  # the producer saw the end of the input
        self.waits = 0  # times the consumer found the buffer empty (for statistics and autotuning)
        self._ram_budget = autotune.ram_budget(ctx.options) if self._autotune else 0
        self._element_bytes = 0  # estimated from the first element, for the RAM budget
        self._filled = False  # the producer filled the buffer since the capacity last grew
        self._consumer_waiting = False
        self._first_served = False
        self._on_caller = False  # an outer stage's thread runs this one's input (``serve_on_caller``)
        # on demand (``judge_consumer``): the producer is parked and calls read the input on the consumer's thread
        self._judge: overlap.OverlapJudge | None = None
        self._parked = False
        self._t_out: float | None = None  # when the last call that refilled ``_local`` returned
        self._grabbed = 0  # elements that call moved into ``_local``
        self._make_seconds = 0.0  # the producer's time inside its input, and the elements it got there
        self._made = 0

    def _start(self, soon: bool = False):
        self._thread = threading.Thread(target=self._produce, name="jaxfeed-prefetch", daemon=True)
        if soon:  # by the starter thread: the caller does not wait for it to run (engine/thread_start.py)
            start_soon(self._thread)
        else:
            self._thread.start()

    def start_ahead(self):
        if self._thread is None and not self._on_caller:  # (not once the input ended: then it is _NO_THREAD)
            self._start()

    def serve_on_caller(self, park: bool = False) -> bool:
        """An outer stage that runs its own producer thread over this one (the distributed iterator's prefetch
        to the devices) takes this prefetch's place: from now on every call reads the input on the caller's
        thread, elements already buffered (a restored state) first, and no producer thread is started, so
        each element crosses one thread boundary instead of two. The state keeps its form. False (nothing
        changed) when the producer thread has already started, unless ``park``: then that thread parks (the
        distributed iterator serving on demand: nothing overlaps for either thread)."""
        if self._on_caller:
            return True
        if self._thread is not None and self._thread is not _NO_THREAD:
            if not park:
                return False
            with self._cond:
                self._parked = True
            with self._input_lock:  # the block it may be reading is appended under this lock (served first);
                pass  # it looks at ``_parked`` under it before reading again: from here on it stays parked
        self._on_caller = True
        self._filled = False  # (filled by the caller's read-ahead from now on: see _refill_local)
        return True

    def _produce(self):
        while True:
            with self._cond:
                while not self._stop and (self._parked or len(self._buf) >= self.capacity):
                    self._cond.wait()
                if self._stop:
                    return
                room = self.capacity - len(self._buf)
            with self._input_lock:
                if self._stop:
                    return
                if self._parked:  # parked meanwhile: the consumer reads the input now
                    continue
                timed = self._judge is not None
                t0 = overlap.clock() if timed else 0.0
                try:
                    block = self.input.next_many(min(room, CHUNK))
                    block = self._with_deferred(block)
                except Exception as e:  # noqa: BLE001 - delivered to the consumer in order
                    block = [Failure(e)]
                except BaseException as e:  # noqa: BLE001 - never leave the consumer waiting
                    block = [Failure(e)]
                    self._stop = True
                if timed:
                    self._make_seconds += overlap.clock() - t0
                    self._made += len(block)
                # appended before the input lock goes: a consumer reading on demand takes that lock and then
                # finds this block in the buffer, ahead of what it reads itself
                with self._cond:
                    if not block:
                        self._ended = True
                        self._buf.append(_END)
                        self._cond.notify_all()
                        return
                    if not self._element_bytes and self._autotune and type(block[0]) is not Failure:
                        self._element_bytes = autotune.element_bytes(block[0])
                    self._buf.extend(block)
                    if len(self._buf) >= self.capacity and not self._consumer_waiting:
                        self._filled = True  # it got ahead of the consumer
                    self._cond.notify_all()

    def _read_here(self, n) -> bool:
        """Read on the calling thread, under the input lock: what a producer parked meanwhile had appended (it
        appends under that lock) goes to ``_local`` first, and False (nothing read); else one read of up to ``n``
        elements (``_END`` at the input's end), and True."""
        with self._input_lock:
            if self._buf:
                with self._cond:
                    self._local.extend(self._buf)
                    self._buf.clear()
                return False
            try:
                block = self._with_deferred(self.input.next_many(max(1, min(n, CHUNK))))
            except Exception as e:  # noqa: BLE001 - delivered in order
                block = [Failure(e)]
        if not block:
            self._ended = True
            block = [_END]
        self._local.extend(block)
        return True

    def _with_deferred(self, block):
        """``block`` and, after it, the error its input met past it (deferred to its next call) as a
        ``Failure``: buffered in place, so a state saved before the next read keeps it."""
        error = self.input.take_deferred() if block else None
        return block if error is None else block + [Failure(error)]

    def _first_here(self, n):
        """The first call is served on the consumer thread, and the producer starts after it: the first
        elements come without a thread hand-off (time to first batch). (Also every call served on the caller.)"""
        if not self._read_here(n):
            return
        if self._ended and self._thread is None:
            self._thread = _NO_THREAD  # nothing left to produce
        # The producer starts now, so the buffer fills while the consumer works on what it got (a training
        # loop's first step: compiling, seconds), but on the starter thread: Thread.start() waits for the new
        # thread to run, and with other stages' threads busy that wait (for the GIL) took milliseconds here.
        self._first_served = True
        if self._thread is None and not self._on_caller:  # (served on the caller: an outer stage's thread)
            self._start(soon=True)

    def read_ahead(self) -> bool:
        """Served on the caller's thread (``serve_on_caller``): read one element into the buffer, up to its
        capacity, as the producer thread would have -- for a caller with nothing else to do (the distributed
        iterator while its buffer of steps is full). False when nothing was read (the buffer is full, the
        input ended, or an error is buffered: what follows it is read when asked for)."""
        buf = self._buf
        if not self._on_caller or self._ended or len(buf) >= self.capacity or \
                (buf and type(buf[-1]) is Failure):
            return False
        with self._input_lock:
            try:
                block = self.input.next_many(1)
            except Exception as e:  # noqa: BLE001 - delivered in order
                block = [Failure(e)]
        if not block:
            self._ended = True
            buf.append(_END)
            return False
        if not self._element_bytes and self._autotune and type(block[0]) is not Failure:
            self._element_bytes = autotune.element_bytes(block[0])
        buf.extend(block)
        if len(buf) >= self.capacity:
            self._filled = True  # it got ahead of the consumer
        return True

    def new_reader(self) -> None:
        """The thread that reads this prefetch changes (the distributed iterator starts or stops its own): no
        observation of the consumer spans the change, and a read-ahead that stopped is no read-ahead falling
        behind (the give-back in ``_refill_local``); what it read stays buffered."""
        self._filled = False
        self._t_out = None

    def holds_elements(self) -> bool:
        """Elements made earlier are waiting to be served (read ahead, or a restored state's)."""
        return bool(self._local or self._buf)

    def _refill_local(self, n):
        """Fill ``_local``: the first call from the input here (``_first_here``), later ones from the buffer."""
        if self._on_caller:
            if self._buf:  # elements read ahead (``read_ahead``, a restored state, a parked producer), in order
                with self._cond:
                    self._local.extend(self._buf)
                    self._buf.clear()
            elif self._ended:
                self._local.append(_END)
            elif self._filled:
                # the caller's read-ahead had filled the buffer and could not keep it filled: its thread has
                # the input's work and its own on the same time slices (a training loop, on a busy machine,
                # measured stalls 2-4x longer), so this prefetch gets its own thread back from now on
                self._on_caller = False
                if self._judge is not None and self._judge.on_demand:  # (its own judge keeps it parked)
                    self._serve_on_demand(n, self._judge)
                else:
                    self._unpark()  # (parked when taken over after it had started)
                    self._grab()
            else:
                self._first_here(n)
        elif self._judge is not None:
            self._judged_refill(n)
        elif self._thread is None and not self._first_served and not self._buf:
            self._first_here(n)
        else:
            self._grab()

    # ------------------------------------------------------------------ on demand (engine/overlap.py)
    def judge_consumer(self, on: bool = True) -> None:
        """This prefetch is the pipeline's output stage, read by the user's loop: serve on demand while that
        loop does next to nothing between calls (AUTOTUNE only; ``Options.autotune.enabled=False`` keeps the
        thread). ``on=False`` keeps the thread for good (a reader that takes turns among several pipelines:
        each one's time away is the others' time)."""
        if on and autotune.enabled(self.ctx.options):
            if self._judge is None:
                self._judge = overlap.OverlapJudge()
        else:
            self._judge = None
            self._unpark()

    @property
    def executor_decision(self):
        """Where this prefetch reads its input, once its judge has an opinion (shown by ``stats()``)."""
        judge = self._judge
        return None if judge is None or judge.last_ratio is None else judge.describe("element")

    def _judged_refill(self, n):
        judge = self._judge
        if judge.on_demand:
            self._serve_on_demand(n, judge)
            return
        t_in = overlap.clock()
        if self._thread is None and not self._first_served and not self._buf:
            self._first_here(n)
        else:
            if self._t_out is not None and self._made:
                making = self._make_seconds / self._made * self._grabbed
                if judge.observe(t_in - self._t_out, making):  # the consumer does next to nothing: park
                    with self._cond:
                        self._parked = True
                    self._t_out = None
                    self._serve_on_demand(n, judge)
                    return
            self._grab()
        self._grabbed = len(self._local)
        self._t_out = overlap.clock()

    def _serve_on_demand(self, n, judge):
        """Read on the consumer's thread: what the parked producer had buffered first, then the input."""
        t_in = overlap.clock()
        if not self._read_here(n):
            self._t_out = None  # made by the thread: no observation
            return
        t_out = overlap.clock()
        if self._t_out is not None and judge.observe(t_in - self._t_out, t_out - t_in):
            self._unpark()  # the consumer works between calls now: the thread can hide production again
            t_out = None
        self._t_out = t_out

    def _unpark(self):
        if not self._parked:
            return
        with self._cond:
            self._parked = False
            self._make_seconds, self._made = 0.0, 0
            self._cond.notify_all()

    def _wait_for_items(self):
        if self._thread is None:
            self._start()
        with self._cond:
            if not self._buf:
                self.waits += 1
                # Grow only if the producer filled the buffer since the last growth: then it keeps up on
                # average and a deeper buffer absorbs its bursts. A producer that never fills the buffer is
                # simply slower than the consumer, and more buffer would only hold memory.
                if self._autotune and self._filled and self.capacity < MAX_AUTOTUNE and \
                        2 * self.capacity * self._element_bytes <= self._ram_budget:
                    self.capacity *= 2
                    self._filled = False
                    self._cond.notify_all()
                self._consumer_waiting = True
                while not self._buf:
                    self._cond.wait()
                self._consumer_waiting = False

    # The consumer takes everything buffered in one locked step into ``_local`` and serves from there
    # without locks (a lock round trip per element cost ~2 us). So up to 2 x capacity elements are held:
    # the consumer's share and a refilled buffer.
    def _grab(self):
        self._wait_for_items()
        with self._cond:
            self._local.extend(self._buf)
            self._buf.clear()
            self._cond.notify_all()

    def _next(self):
        local = self._local
        if not local:
            self._refill_local(1)
        item = local[0]
        if item is _END:
            raise StopIteration
        if type(item) is Failure:
            _raise(local, item)
        local.popleft()
        return item

    def _next_many(self, n):
        local = self._local
        if not local:
            self._refill_local(n)
        out = []
        while local and len(out) < n:
            item = local[0]
            if item is _END:
                break
            if type(item) is Failure:
                if out:
                    break
                _raise(local, item)
            out.append(local.popleft())
        return out

    def buffer_fill(self) -> float:
        return len(self._buf) / max(1, self.capacity)

    def children(self):
        return [self.input]

    def get_state(self):
        with self._input_lock:
            with self._cond:
                buffered = [x for x in (*self._local, *self._buf) if x is not _END]
                return {"input": self.input.get_state(), "buffer": buffered, "ended": self._ended,
                        "capacity": self.capacity}

    @staticmethod
    def held(state, weight=None):
        """The buffered input elements (``Iterator.held``)."""
        return count_held(state["buffer"], weight)

    def set_state(self, state):
        self._shutdown()
        self.input.set_state(state["input"])
        self._buf = collections.deque(state["buffer"])
        self._local = collections.deque()
        self._ended = bool(state["ended"])
        if self._ended:
            self._buf.append(_END)
        capacity = state["capacity"]
        if type(capacity) is not int or capacity < 1:  # a state file is outside input; < 1 would never fill
            raise ValueError(f"capacity {capacity!r:.40} is not a positive integer")
        self.capacity = capacity
        self._stop = False
        self._thread = None
        self._t_out = None  # (no observation across a restore; the judge keeps its mode)
        self._make_seconds, self._made = 0.0, 0
        if self._ended:  # nothing left to produce: never start a thread
            self._thread = _NO_THREAD

    def _shutdown(self):
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        t = self._thread
        if t is not None and t is not _NO_THREAD and t is not threading.current_thread():
            join_started(t, timeout=30)

    def close(self):
        if finalizing():  # take no lock, wait for no thread: they may be held by a thread stopped for good
            self._stop = True
            super().close()
            return
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        # Wait briefly for the producer to leave its input before closing it; it exits on its own after.
        locked = self._input_lock.acquire(timeout=5)
        try:
            super().close()
        finally:
            if locked:
                self._input_lock.release()


def _raise(local, failure):
    """Raise the error of ``failure``, the head of ``local``. An ``Exception`` concerns its element: it is
    dropped and the next call goes on after it. Anything else (KeyboardInterrupt, SystemExit) stopped the
    producer: it stays, and every later call raises it again -- there is nothing after it to wait for."""
    if isinstance(failure.error, Exception):
        local.popleft()
    raise failure.error


class _NoThread:
    def start(self):
        pass


_NO_THREAD = _NoThread()
