"""Interleave slots whose inner iterators live in worker processes: for inner datasets whose reads run Python
per element (``from_generator`` sources), which hold the GIL however many reader threads call them.

A parallel interleave that AUTOTUNE lets choose (``executor_choice.interleave_reason``) opens each slot's inner
dataset through a ``RemoteOpener``: ``map_func`` still runs here (it only builds the dataset; its arguments are
resolved here), and a dataset that is a bare ``from_generator`` is cloudpickled, with the pipeline's
``Options`` and iteration key, to one of the process's ``InnerWorkers``, which builds and holds its iterator
(``engine/inner_worker.py``). The slot then holds a ``RemoteInner`` whose reads are answered there -- what
the read would have given here (the generator's values converted there, as stacked rows under a batch) --
so the slot model, the order, errors and the saved state are the same whichever process reads.

- No reader thread runs once slots read in workers: the consumer asks each slot's reads ahead (``DEPTH``; a
  future slot is opened, and its first reads asked, as soon as it is known) and takes the answers where the
  sequential iterator would read. The worker reads ahead itself while nothing is asked (``inner_worker``: up
  to ``AHEAD`` reads a slot and ``AHEAD_BYTES`` of pickled answers for all its slots together), and
  a receiver thread per worker takes answers off the pipe as they come, so a worker never waits for the
  consumer's thread to run. (P6 as ported, measured on 2 cores: with reader threads asking one read at a time
  the workers idled ~40% of the time.)
- The workers are shared by every interleave of this process and kept between iterators (an epoch is often
  shorter than starting them and importing what a generator imports: forkserver start ~30 ms, ``pyarrow``
  ~50-200 ms); they start on a thread of their own the first time an eligible slot opens, and slots open
  here until they are up. ``close_workers`` (also at interpreter exit) stops them; a forked child forgets its
  parent's.
- The first interleave to use them starts ``min(cpu_count, cycle_length)`` workers (its CPU budget, and no more
  than the slots it reads at once); an interleave uses ``min(its own limit, the workers there are)``. The inner
  dataset of input element ``i`` goes to worker ``i % that``: the consumer takes the slots in turn, and
  neighbouring input elements are neighbouring slots, so each worker has its share of every round (by open
  slots instead, the four files P6 moves on to together often went to one worker).
- A generator that could change something of this process (a global, a list it reaches:
  ``worker_safety.py``) opens here: in a worker, the change would happen to a copy. So does a dataset that
  does not pickle, or whose pickle is larger than ``MAX_PAYLOAD`` (a generator closing over its data: copying
  it to a worker per slot would cost more than reading it here) -- and then the iterator's later slots too --
  and one a worker fails to open (a module the workers cannot import: it is read here from then on).
  So does a generator whose module (or one its module imports) was edited since a generator of it was first
  sent to the workers (``code_stamps``: a notebook's reload; the workers still run the code they imported).
  ``RemoteOpener.reason`` says why, for ``explain``.
- A worker that dies fails the reads of its slots with ``WorkerDiedError`` (in their place); the workers are
  then replaced for the slots opened after.
- ``deterministic=False``: where the current slot's answer is not in, the consumer takes a slot whose answer
  is (``RemoteInner.answered``), or waits for the next answer from any worker (``InnerWorkers.wait_any``) --
  as it switches to a slot a reader thread has filled. A generator held up in one worker then holds up only
  the slots read there.
- Not done: the statistics have no rows for the inner datasets read in workers.
"""

from __future__ import annotations

import atexit
import collections
import itertools
import os
import pickle
import queue
import threading

from multiprocessing import connection

from ..errors import WorkerDiedError
from ..iterators.base import Iterator, finalizing
from ..iterators.interleave import read_block
from . import inner_worker
from .inner_worker import RID
from .processes import mp_context, start_without_main
from .processes import stop as stop_processes
from . import code_stamps
from .worker_safety import safety_reason

MAX_PAYLOAD = 1 << 20  # bytes of a pickled inner dataset sent to a worker at most (see the module doc)
DEPTH = 2  # reads a remote slot has asked ahead: its worker reads the next while the consumer takes the last
POLL_SECONDS = 0.5  # how often a receiver re-checks that its worker lives
STOP_SECONDS = 0.1
JOIN_SECONDS = 2.0
START_WAIT_SECONDS = 30.0  # how long closing the workers waits for their start (``close_workers``)


class Answer:
    """A request's answer, once its worker's receiver thread took it off the pipe: ``value()`` waits for it
    and unpickles it on the thread that asks (the receiver only moves bytes, so it hardly needs the GIL)."""

    __slots__ = ("data", "error", "done", "_value", "opens", "closes")

    def __init__(self, opens=None, closes=None):
        self.data = None  # the pickled answer (a view of what the receiver took off the pipe)
        self.error = None  # a WorkerDiedError: the worker stopped before answering
        self.done = False
        self._value = _UNREAD
        self.opens = opens  # the key an open request opens (a slot held there once answered)
        self.closes = closes  # the key a close request closes (the worker reads no more for it once answered)

    def value(self, workers: "InnerWorkers", worker: int):
        if self._value is _UNREAD:
            if not self.done:
                workers.wait(worker, self)
            if self.error is not None:
                raise self.error
            self._value, self.data = pickle.loads(self.data), None
        status, value = self._value
        if status == "error":
            raise value
        return value


_UNREAD = object()
DIRECT_BYTES = 16384  # a request up to this size is sent by the thread that asks (see InnerWorkers)
_STOP = pickle.dumps(None)


class InnerWorkers:
    """``n`` worker processes; per worker a pipe, the answers it owes by request id, a receiver thread that
    takes every answer off the pipe as it comes (a worker never waits to send one: an answer of stacked rows
    is larger than the pipe's buffer), and a sender thread for large requests.

    Ctrl-C must not leave an answer matched to the wrong request. Answers used to be matched by order: Ctrl-C
    between noting an answer owed and sending its request (a send blocks while the worker's pipe is full --
    an open's payload, up to ``MAX_PAYLOAD``, while the worker is inside a long read) shifted every later
    answer onto the request before it (another slot's elements in this one), or left half a request in the
    pipe. Now each request carries an id that its answer comes back with (a request interrupted before or
    after its write is then only an answer no one takes), and a request that could block -- larger than
    ``DIRECT_BYTES``, one ``write`` that is all or nothing, or behind one -- goes out on the sender thread,
    after being queued in one call (``SimpleQueue.put``) that an interrupt cannot split. Small requests,
    nearly all of them, are sent by the asking thread: handing every read to the sender thread made P6 as
    ported ~5% slower (a GIL hand-off per request)."""

    def __init__(self, n: int):
        ctx = mp_context()
        self.pid = os.getpid()
        self.procs, self.conns, self.senders, self.receivers = [], [], [], []
        self.owed = [{} for _ in range(n)]  # request id -> Answer
        self.arrived = [threading.Condition() for _ in range(n)]  # guards ``owed``; notified as answers come
        self.send_locks = [threading.Lock() for _ in range(n)]  # one write at a time per pipe
        self.order_lock = threading.Lock()  # guards ``queued``: a request goes direct only behind none queued
        self.queued = [0] * n  # requests for the sender thread not yet sent, per worker
        self.outboxes = [queue.SimpleQueue() for _ in range(n)]  # (answer, id, message, op); None: stop
        self._ids = itertools.count()
        self.closed = False
        self.broken = False  # a worker died: the next slots get new workers
        self.dead = [False] * n  # a worker that died (or was stopped): requests to it fail at once
        self.busy = [ctx.RawValue("q", -1) for _ in range(n)]  # the key a worker reads for now, or -1
        self.held = [set() for _ in range(n)]  # keys of slots a worker opened (answered) and not closed here
        self.dropped = [set() for _ in range(n)]  # keys of slots closed here, until the worker closed them too
        self.stuck = [None] * n  # the key a worker was stopped for: stuck in a read for a closed slot
        self.stamps: dict = {}  # file -> (size, mtime) when a generator of its module was first sent here
        self.answers = 0  # answers that came (or failed) from any worker: ``wait_any`` waits for the next
        self.any_arrived = threading.Condition()
        try:
            for i in range(n):
                mine, theirs = ctx.Pipe(duplex=True)
                p = ctx.Process(target=inner_worker.main, args=(theirs, os.getpid(), self.busy[i]), daemon=True,
                                name=f"jaxfeed-interleave-worker-{i}")
                start_without_main(p)
                theirs.close()
                self.procs.append(p)
                self.conns.append(mine)
            for i in range(n):
                for loop, name, threads in ((self._send, "send", self.senders),
                                            (self._receive, "receive", self.receivers)):
                    t = threading.Thread(target=loop, args=(i,), daemon=True, name=f"jaxfeed-slot-{name}-{i}")
                    t.start()
                    threads.append(t)
        except BaseException:
            self.close()
            raise

    def __len__(self):
        return len(self.procs)

    def changed_files(self, fn) -> list:
        """The files of ``fn``'s module and its imports (``code_stamps``) that changed since a generator of
        theirs was first sent to these workers -- which imported them then and run that code still; the others
        are noted as they are now."""
        changed = []
        for path, stamp in code_stamps.file_stamps(fn).items():
            if self.stamps.setdefault(path, stamp) != stamp:
                changed.append(path)
        return changed

    def submit(self, worker: int, request) -> Answer:
        """Send ``request`` (``(op, key, *args)``) to ``worker`` without waiting for its answer."""
        op, key = request[0], request[1]
        if op == "close":
            with self.arrived[worker]:
                self.held[worker].discard(key)
                self.dropped[worker].add(key)
        answer = Answer(opens=key if op == "open" else None, closes=key if op == "close" else None)
        rid = next(self._ids)
        message = pickle.dumps((rid, *request), protocol=5)
        with self.order_lock:
            later = self.queued[worker] > 0 or len(message) > DIRECT_BYTES
            if later:
                self.queued[worker] += 1  # (counted first: an interrupt before the put leaves every later
                self.outboxes[worker].put((answer, rid, message, op))  # request queued, in order)
        if not later:
            self._write(worker, answer, rid, message, op)
        return answer

    def call(self, worker: int, request):
        """Send ``request`` to ``worker`` and return its answer's value (raising its error)."""
        return self.submit(worker, request).value(self, worker)

    def wait(self, worker: int, answer: Answer) -> None:
        cond = self.arrived[worker]
        with cond:
            while not answer.done:
                cond.wait(POLL_SECONDS)
                if self.closed and not self.senders[worker].is_alive():  # queued as the workers closed
                    self._fail_queued(worker)
                elif not answer.done:
                    self._stop_if_stuck(worker)

    def wait_any(self, seen: int, timeout: float) -> None:
        """Wait until an answer came from any worker since ``answers`` was ``seen`` (at most ``timeout``)."""
        with self.any_arrived:
            if self.answers == seen:
                self.any_arrived.wait(timeout)

    def _answered(self) -> None:
        with self.any_arrived:
            self.answers += 1
            self.any_arrived.notify_all()

    def _stop_if_stuck(self, worker: int) -> None:
        """Stop ``worker`` if it is in a read for a slot closed here while a request waits behind it and it
        holds no open slot (``arrived[worker]`` held).

        The workers outlive iterators. A generator that blocked in a read made ahead -- a server that never
        answers, a wait for something only the consumer would have done -- held its worker forever after its
        iterator was gone (a ``take(n)``, a ``break``), and every later slot sent there waited with it: the
        next epoch hung. That read is no one's now, and no slot's state is lost with the worker; its opens
        still waiting fail with a WorkerDiedError saying why (those slots open here instead), and the next
        iterator starts new workers. A worker that holds a slot still open is left to its read."""
        key = self.busy[worker].value
        if (key >= 0 and key in self.dropped[worker] and not self.held[worker] and self.stuck[worker] is None
                and self.procs[worker].is_alive()):
            self.stuck[worker] = key
            self.procs[worker].terminate()

    def _write(self, worker: int, answer: Answer, rid: int, message: bytes, op: str) -> None:
        """Note ``answer`` owed under ``rid``, then send the request (or fail it: the workers closed, or this
        one died)."""
        with self.arrived[worker]:
            if self.closed or self.dead[worker]:
                self._fail(worker, answer, op)
                return
            self.owed[worker][rid] = answer
        with self.send_locks[worker]:
            try:
                self.conns[worker].send_bytes(message)
            except (OSError, ValueError):
                pass  # the receiver finds the worker gone and fails what it owes

    def _send(self, worker: int) -> None:
        """The sender thread: send the requests queued for ``worker`` in order, then the stop."""
        box = self.outboxes[worker]
        while True:
            item = box.get()
            if item is None:  # close: the stop goes behind what was queued
                with self.send_locks[worker]:
                    try:
                        self.conns[worker].send_bytes(_STOP)
                    except (OSError, ValueError):
                        pass
                return
            self._write(worker, *item)
            with self.order_lock:
                self.queued[worker] -= 1

    def _fail_queued(self, worker: int) -> None:
        """Fail what is still queued for ``worker`` after its sender stopped (requests that came as it closed)."""
        while True:
            try:
                item = self.outboxes[worker].get_nowait()
            except queue.Empty:
                return
            if item is not None:
                with self.arrived[worker]:
                    self._fail(worker, item[0], item[3])

    def _receive(self, worker: int) -> None:
        conn, proc = self.conns[worker], self.procs[worker]
        owed, cond = self.owed[worker], self.arrived[worker]
        while True:
            try:
                ready = connection.wait([conn, proc.sentinel], POLL_SECONDS)
                if conn in ready:
                    data = conn.recv_bytes()
                elif proc.sentinel in ready:
                    raise EOFError
                else:
                    if self.closed:
                        raise EOFError
                    continue
            except (EOFError, OSError, ValueError):
                with cond:
                    self.dead[worker] = True
                    if not self.closed:
                        self.broken = True
                    for answer in owed.values():
                        self._fail(worker, answer, "request")
                    owed.clear()
                return
            (rid,) = RID.unpack_from(data)
            with cond:
                answer = owed.pop(rid, None)  # None: its asker was interrupted before it had the answer
                if answer is not None and answer.opens is not None and answer.opens not in self.dropped[worker]:
                    self.held[worker].add(answer.opens)  # (opened there: its state is the worker's now)
                if answer is not None and answer.closes is not None:
                    self.dropped[worker].discard(answer.closes)
                if answer is not None:
                    answer.data, answer.done = memoryview(data)[RID.size:], True
                    cond.notify_all()
            if answer is not None:
                self._answered()

    def _fail(self, worker: int, answer: Answer, what: str) -> None:
        """Answer ``answer`` with the worker's death or close (``arrived[worker]`` held)."""
        answer.error, answer.done = self._died(worker, what), True
        self.arrived[worker].notify_all()
        self._answered()

    def _died(self, worker: int, what: str) -> WorkerDiedError:
        proc = self.procs[worker]
        if self.stuck[worker] is not None:
            how = ("was stopped: it was stuck in a read for a slot of an iterator closed since (its generator "
                   "did not return)")
        elif self.closed:
            how = "was stopped (the workers were closed)"
        else:
            how = f"died (exit code {proc.exitcode})"
        return WorkerDiedError(f"interleave worker process {proc.name} (pid {proc.pid}) {how} before "
                               f"answering a {what} of its slot", "interleave")

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for box in self.outboxes:
            box.put(None)
        for t in self.senders:  # (a send blocked on a stuck worker is cut short below, when it is terminated)
            t.join(STOP_SECONDS)
        stop_processes(self.procs, STOP_SECONDS, JOIN_SECONDS)
        for t in self.senders + self.receivers:
            if t is not threading.current_thread():
                t.join(JOIN_SECONDS)
        for conn in self.conns:
            conn.close()
        for worker in range(len(self.senders)):
            self._fail_queued(worker)


# ------------------------------------------------------------------------------------- the process's workers
_lock = threading.Lock()
_workers: InnerWorkers | None = None
_starting: threading.Thread | None = None
_start_error: BaseException | None = None


def shared_workers(n: int) -> InnerWorkers | None:
    """The process's workers if they are up (started with ``n`` workers the first time), else None after
    starting them on a thread of their own. A start that failed is not retried (None, ``start_error``)."""
    global _workers, _starting
    with _lock:
        w = _workers
        if w is not None and (w.pid != os.getpid() or w.broken or w.closed):
            if w.pid == os.getpid() and not w.closed:
                threading.Thread(target=w.close, daemon=True, name="jaxfeed-slot-workers-close").start()
            _workers = w = None
        if w is not None or _start_error is not None:
            return w
        if _starting is None:
            _starting = threading.Thread(target=_start, args=(n,), daemon=True, name="jaxfeed-slot-workers-start")
            _starting.start()
        return None


def start_error() -> BaseException | None:
    return _start_error


def _start(n: int) -> None:
    global _workers, _starting, _start_error
    try:
        workers = InnerWorkers(n)
    except BaseException as e:  # noqa: BLE001 - slots open in this process; the reason shows in explain()
        with _lock:
            _start_error, _starting = e, None
        return
    with _lock:
        _workers, _starting = workers, None


def wait_started(timeout: float | None = None) -> InnerWorkers | None:
    """Wait for a start under way (tests; ``close_workers``); the workers, or None."""
    t = _starting
    if t is not None:
        t.join(timeout)
    return _workers


def close_workers() -> None:
    """Stop the process's workers (a start under way first finishes, or is given ``START_WAIT_SECONDS``: at
    interpreter exit a start that never ends must not hold the exit; its daemon processes are terminated by
    multiprocessing's own exit handler). Slots still open on them fail their next read with ``WorkerDiedError``."""
    global _workers, _start_error
    if finalizing():
        return
    wait_started(START_WAIT_SECONDS)
    with _lock:
        w, _workers, _start_error = _workers, None, None
    if w is not None and w.pid == os.getpid():
        w.close()


def _forget_in_child() -> None:
    global _workers, _starting, _lock
    _workers, _starting, _lock = None, None, threading.Lock()


atexit.register(close_workers)
os.register_at_fork(after_in_child=_forget_in_child)


# ------------------------------------------------------------------------------------- one slot
_keys = itertools.count()


class RemoteInner(Iterator):
    """A slot's inner iterator living in a worker. Its open and its reads are asked ahead -- reads ``DEPTH``
    deep: the worker reads the next while the consumer works through the last -- and ``read`` takes the
    oldest. ``get_state``, ``set_state`` and ``close`` go in order behind them. (``Slot.read`` asks
    ``read`` instead of reading it here, since ``remote`` is True.) A dataset the worker fails to open is
    opened here instead, at the first use, and read here from then on (``_local``)."""

    remote = True

    def __init__(self, node, ctx, workers: InnerWorkers, worker: int, key: int, opened: Answer,
                 opener: "RemoteOpener"):
        super().__init__(node, ctx)
        self._workers, self._worker, self._key = workers, worker, key
        self._opened, self._opener = opened, opener  # the open's answer, until it is checked
        self._local = None  # the inner iterator, built here after the worker failed to open it
        self._asked: collections.deque = collections.deque()  # reads asked, oldest first
        self._ended = False  # a read answered the end: nothing more is asked
        self._closed = False

    def _check_open(self) -> None:
        """Raise nothing if the worker opened the dataset; else build it here (the opener stops sending)."""
        opened = self._opened
        try:
            opened.value(self._workers, self._worker)  # (Ctrl-C while it waits: checked again at the next use)
            self._opened = None
        except Exception as e:  # noqa: BLE001 - what the worker cannot build is built here
            self._opened = None
            self._workers.held[self._worker].discard(self._key)  # (the worker holds nothing of it)
            self._asked.clear()
            self._closed = True  # (nothing to close there)
            self._opener.failed_remotely(e)
            self._local = self.ctx.build(self.node)

    def ask(self, size: int, stacked: bool) -> None:
        """Ask reads up to ``DEPTH`` ahead (no wait)."""
        if self._local is None:
            while len(self._asked) < DEPTH and not self._ended and not self._closed:
                self._asked.append(self._workers.submit(self._worker, ("read", self._key, size, stacked)))

    def answered(self, size: int, stacked: bool) -> bool:
        """Whether ``read`` would return without waiting for the worker (its reads asked first)."""
        if self._local is not None:
            return True
        self.ask(size, stacked)
        if self._opened is not None and not self._opened.done:
            return False
        return not self._asked or self._asked[0].done

    def answers_seen(self) -> int:
        """How many answers this slot's workers have given so far (for ``wait_any``)."""
        return self._workers.answers

    def wait_any(self, seen: int, timeout: float) -> None:
        """Wait for an answer from any of this slot's workers after the ``seen`` first (at most ``timeout``)."""
        if self._local is None:
            self._workers.wait_any(seen, timeout)

    def read(self, size: int, stacked: bool):
        self.ask(size, stacked)
        if self._opened is not None:
            self._check_open()
        if self._local is not None:
            return read_block(self._local, size, stacked)
        if not self._asked:
            return [], True
        items, ended, _ = self._asked[0].value(self._workers, self._worker)  # (an interrupt here loses nothing)
        self._asked.popleft()
        if ended:
            self._ended = True
            self._asked.clear()  # reads past the end: their answers are ([], True) and need no one
        else:
            self.ask(size, stacked)
        return items, ended

    def get_state(self):
        """The inner iterator's state as of the oldest read not taken yet: the ``before`` of the oldest read
        asked, else the worker's (before its oldest read made ahead, else now). What was read past it is read
        again after a restore, so the slot saves no more than a slot read here would."""
        if self._opened is not None:
            self._check_open()
        if self._local is not None:
            return self._local.get_state()
        if self._asked:
            saved = self._asked[0].value(self._workers, self._worker)[2]
        else:
            saved = self._workers.call(self._worker, ("state", self._key))
        kind, value = saved
        if kind == "error":
            raise value
        return value

    def set_state(self, state):
        if self._opened is not None:
            self._check_open()
        if self._local is not None:
            self._local.set_state(state)
            return
        self._asked.clear()
        self._ended = False
        self._workers.call(self._worker, ("set_state", self._key, state))

    def _next_many(self, n):  # the Iterator protocol, for completeness: a slot reads through ``read``
        items, ended = self.read(n, False)
        return items

    def children(self):
        return [] if self._local is None else [self._local]

    def close(self) -> None:
        if self._local is not None:
            self._local.close()
        if self._closed:
            return
        self._closed = True
        self._asked.clear()
        if finalizing() or self._workers.closed or self._workers.broken:
            return
        self._workers.submit(self._worker, ("close", self._key))  # its answer needs no one


class RemoteOpener:
    """Opens an interleave's slots in the process's workers where it can (see the module doc); ``reason`` says
    why the last slot opened here, None while slots go to workers."""

    def __init__(self, limit: int, known: bool = False):
        self.limit = max(1, limit)
        self.known = known  # the Dataset's last iterator read slots in workers
        self.reason: str | None = None
        self.opened = 0  # slots opened in workers
        self._off = False  # a reason that holds for every later slot of this iterator
        self._check = (None, None)  # the generator function last checked, and why it must stay here (or None)
        self._stamps = (None, None)  # ... last checked against the workers' file stamps, and what changed

    def may_open(self) -> bool:
        """Whether a slot opened now is likely to go to a worker: they are up, nothing ruled this iterator out,
        and a slot of it (or of the Dataset's last iterator: ``known``) went there. (Never starts them: an
        interleave of other inner datasets must not.)"""
        return not self._off and (self.opened > 0 or self.known) and _workers is not None and not _workers.broken

    def open(self, dataset, ctx, position: int):
        """A ``RemoteInner`` for ``dataset`` (a node; the inner dataset of input element ``position``), or None:
        open it here."""
        from ..nodes.generator import Generator

        if self._off:
            return None
        if type(dataset) is not Generator:
            self.reason = f"inner dataset is {dataset.kind}, not from_generator: its reads need no process"
            return None
        fn = dataset.generator
        checked, unsafe = self._check
        if fn is not checked:  # (one function for every slot, as a rule: checked once per iterator)
            unsafe = safety_reason(fn)
            if unsafe is not None:
                unsafe = f"{unsafe}: what it changes would change in a worker's copy only"
            # one store: slots open on several threads, and another must never see this function with the
            # last one's verdict (two stores let a slot of a generator that must stay here go to a worker)
            self._check = (fn, unsafe)
        if unsafe is not None:  # (before the workers: such a generator never starts them)
            self.reason = unsafe
            return None
        workers = shared_workers(self.limit)
        if workers is None:
            error = start_error()
            if error is not None:
                self._off, self.reason = True, f"worker processes failed to start ({type(error).__name__}: {error})"
            else:
                self.reason = "worker processes starting: slots open here meanwhile"
            return None
        stamped, stale = self._stamps
        if fn is not stamped:
            changed = workers.changed_files(fn)
            stale = changed and (f"{', '.join(map(os.path.basename, changed))} changed since the worker "
                                 f"processes imported it: they would run the old code")
            self._stamps = (fn, stale)  # (one store, as above)
        if stale:
            self.reason = stale
            return None
        import cloudpickle

        try:
            payload = cloudpickle.dumps((dataset, ctx.options, ctx.iteration))
        except Exception as e:  # noqa: BLE001 - any failure means: here
            self._off, self.reason = True, f"inner dataset cannot be pickled ({type(e).__name__}: {e})"
            return None
        if len(payload) > MAX_PAYLOAD:
            self._off, self.reason = True, (f"inner dataset pickles to {len(payload)} bytes (> {MAX_PAYLOAD}): "
                                            "its data is here")
            return None
        worker = position % min(self.limit, len(workers))
        key = next(_keys)
        # with this process's working directory and environment as they are now: the workers are kept between
        # iterators, and a generator's relative paths and os.environ must read what they would here
        opened = workers.submit(worker, ("open", key, payload, os.getcwd(), dict(os.environ)))
        # (the open is checked at the slot's first read)
        self.opened += 1
        self.reason = None
        return RemoteInner(dataset, ctx, workers, worker, key, opened, self)

    def failed_remotely(self, error: BaseException) -> None:
        """A worker could not open an inner dataset (a module it cannot import): later slots open here."""
        self._off = True
        self.opened -= 1
        self.reason = f"a worker could not open the inner dataset ({type(error).__name__}: {error})"
