"""Parallel ``interleave``: worker threads read the open inner iterators ahead, in blocks, while the
consumer emits in the slot order of the sequential version (see ``interleave.py``).

- Every slot -- the ``cycle`` current ones and up to ``cycle`` *future* ones (the next input elements,
  opened ahead so that a lazy refill does not wait for ``map_func`` and the first read) -- keeps at
  least ``read`` elements buffered (``read = max(block_length, READ_AHEAD)``): when its buffer runs
  below that, one read task (``inner.next_many(read)``) is queued for it. A slot never has two tasks at
  once (inner iterators are not thread-safe), so elements cross threads a block at a time.
- Opening (``map_func`` and building the inner iterator) runs in the slot's first task. Errors of
  ``map_func`` and of inner iterators are stored in the slot's buffer in place (``Failure``) and raised
  when the consumer reaches them; an input error becomes a future of its own, raised where the sequential
  version would meet it. Deterministic order therefore equals the sequential order, errors included.
- ``deterministic=False``: when the current slot has nothing buffered, the consumer moves to an open
  slot that has (or to an empty slot while futures wait), instead of waiting. Every element still comes
  out exactly once.
- ``get_state`` pauses the workers (queued tasks are dropped, running ones finish), records the input,
  every slot's element, position, inner state and buffered elements, then lets them go on. Nothing in
  flight is lost or repeated. ``close`` stops and joins the workers, then closes every inner iterator.
"""

from __future__ import annotations

import collections
import threading

from ..options import effective_deterministic
from .base import Iterator
from .blocks import Failure
from .flat_map import open_inner

READ_AHEAD = 32  # elements per read task, at least (a thread hand-off costs microseconds)
JOIN_TIMEOUT = 30


class _Slot:
    """One inner dataset: made from the input element at ``position``, read ahead into ``buffer``."""

    __slots__ = ("element", "position", "iterator", "restore", "buffer", "ended", "busy", "input_error")

    def __init__(self, element, position):
        self.element = element
        self.position = position
        self.iterator = None  # opened by the first read task
        self.restore = None  # the inner state to restore when it opens (after set_state)
        self.buffer: collections.deque = collections.deque()  # elements and Failures, in order
        self.ended = False  # no more will come: the inner iterator is exhausted, or failed to open
        self.busy = False  # a read task is queued or running
        self.input_error = None  # this "slot" stands for an error of the input, in its place

    def state(self) -> dict:
        if self.iterator is not None:
            inner = self.iterator.get_state()
        else:
            inner = self.restore
        return {"element": self.element, "position": self.position, "inner": inner,
                "buffer": list(self.buffer), "ended": self.ended,
                "input_error": None if self.input_error is None else Failure(self.input_error)}

    @classmethod
    def restored(cls, saved: dict) -> "_Slot":
        slot = cls(saved["element"], saved["position"])
        slot.restore = saved["inner"]
        slot.buffer.extend(saved["buffer"])
        slot.ended = bool(saved["ended"])
        slot.input_error = None if saved["input_error"] is None else saved["input_error"].error
        return slot


class ParallelInterleaveIterator(Iterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        self._cycle = node.cycle
        self._block_length = node.block_length
        self._read = max(node.block_length, READ_AHEAD)
        self.deterministic = effective_deterministic(ctx.options, node.deterministic)
        npc = node.num_parallel_calls
        self.workers = npc if npc > 0 else self._cycle  # AUTOTUNE: one reader per open slot
        self._slots: list = [None] * self._cycle
        self._futures: collections.deque = collections.deque()
        self._c = 0
        self._b = 0
        self._position = 0  # input elements consumed (into futures)
        self._input_done = False
        self._lock = threading.Lock()
        self._task_ready = threading.Condition(self._lock)  # workers wait here
        self._data_ready = threading.Condition(self._lock)  # the consumer (and get_state) waits here
        self._tasks: collections.deque = collections.deque()
        self._threads: list = []
        self._paused = False
        self._closed = False

    # ------------------------------------------------------------------ workers
    def _start(self):
        with self._lock:
            for slot in self._all_slots():  # restored slots read ahead again
                self._schedule(slot)
        for i in range(self.workers):
            t = threading.Thread(target=self._work, name=f"jaxfeed-interleave-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def _work(self):
        while True:
            with self._lock:
                while not self._tasks and not self._closed:
                    self._task_ready.wait()
                if self._closed:
                    return
                slot = self._tasks.popleft()
            items, ended = self._read_slot(slot)
            with self._lock:
                slot.buffer.extend(items)
                slot.ended = ended
                slot.busy = False
                self._schedule(slot)
                self._data_ready.notify_all()

    def _read_slot(self, slot: _Slot):
        """One read task, outside the lock: open the slot if needed, then read a block."""
        try:
            if slot.iterator is None:
                slot.iterator = open_inner(self.node, self.ctx, slot.element, slot.position, "interleave")
                if slot.restore is not None:
                    slot.iterator.set_state(slot.restore)
                    slot.restore = None
            block = slot.iterator.next_many(self._read)
        except BaseException as e:  # noqa: BLE001 - delivered in place; never leave the consumer waiting
            return [Failure(e)], slot.iterator is None  # a slot that failed to open ends after its error
        if block:
            return block, False
        slot.iterator.close()
        slot.iterator = None
        return [], True

    def _schedule(self, slot: _Slot):
        """Queue a read for ``slot`` if it wants one (lock held)."""
        if (not slot.busy and not slot.ended and not self._paused and not self._closed
                and len(slot.buffer) < self._read):
            slot.busy = True
            self._tasks.append(slot)
            self._task_ready.notify()

    # ------------------------------------------------------------------ input
    def _top_up(self):
        """Open up to ``cycle`` future slots from the next input elements (consumer thread)."""
        want = self._cycle - len(self._futures)
        if want <= 0 or self._input_done:
            return
        try:
            block = self.input.next_many(want)
        except Exception as e:  # noqa: BLE001 - raised where the sequential version would meet it
            failed = _Slot(None, self._position)
            failed.input_error = e
            failed.ended = True
            self._futures.append(failed)
            return
        if not block:
            self._input_done = True
            return
        with self._lock:
            for element in block:
                slot = _Slot(element, self._position)
                self._position += 1
                self._futures.append(slot)
                self._schedule(slot)

    # ------------------------------------------------------------------ consumer
    def _advance(self):
        self._b = 0
        self._c = (self._c + 1) % self._cycle

    def _switch_to_ready(self) -> bool:
        """deterministic=False: make a slot that can give something now the current one (lock held)."""
        for j in range(1, self._cycle):
            i = (self._c + j) % self._cycle
            slot = self._slots[i]
            if (slot is not None and (slot.buffer or slot.ended)) or (slot is None and self._futures):
                self._c, self._b = i, 0
                return True
        return False

    def _next_many(self, n):
        if self._closed:
            return []
        if not self._threads:
            self._start()
        self._top_up()
        out: list = []
        while len(out) < n:
            slot = self._slots[self._c]
            if slot is None:
                if not self._futures:
                    self._top_up()
                if self._futures:
                    slot = self._futures.popleft()
                    if slot.input_error is not None:  # the slot stays empty, the cycle stays here
                        if out:
                            self._futures.appendleft(slot)
                            break
                        raise slot.input_error
                    self._slots[self._c] = slot
                    self._top_up()
                    continue
                if self._input_done:
                    if not any(self._slots):
                        break
                    self._advance()
                continue
            with self._lock:
                buf = slot.buffer
                if not buf:
                    if slot.ended:
                        self._slots[self._c] = None
                        self._advance()
                        continue
                    if out:
                        break
                    if not self.deterministic and self._switch_to_ready():
                        continue
                    self._schedule(slot)
                    self._data_ready.wait()
                    continue
                if type(buf[0]) is Failure:
                    if out:
                        break
                    failure = buf.popleft()
                    self._schedule(slot)
                    raise failure.error
                taken = 0
                for _ in range(min(n - len(out), self._block_length - self._b, len(buf))):
                    if type(buf[0]) is Failure:
                        break
                    out.append(buf.popleft())
                    taken += 1
                self._b += taken
                if self._b == self._block_length:
                    self._advance()
                self._schedule(slot)
        return out

    def _next(self):
        out = self._next_many(1)
        if not out:
            raise StopIteration
        return out[0]

    # ------------------------------------------------------------------ state
    def _all_slots(self) -> list:
        return [s for s in self._slots if s is not None] + list(self._futures)

    def get_state(self):
        with self._lock:
            self._paused = True
            for slot in self._tasks:  # queued, not started: drop them
                slot.busy = False
            self._tasks.clear()
            while any(s.busy for s in self._all_slots()):
                self._data_ready.wait()
        try:
            return {"input": self.input.get_state(), "c": self._c, "b": self._b, "position": self._position,
                    "input_done": self._input_done,
                    "slots": [None if s is None else s.state() for s in self._slots],
                    "futures": [s.state() for s in self._futures]}
        finally:
            with self._lock:
                self._paused = False
                for slot in self._all_slots():
                    self._schedule(slot)

    def set_state(self, state):
        self._stop_workers()
        self._close_slots()
        self.input.set_state(state["input"])
        self._c, self._b = int(state["c"]), int(state["b"])
        self._position = int(state["position"])
        self._input_done = bool(state["input_done"])
        self._slots = [None if s is None else _Slot.restored(s) for s in state["slots"]]
        self._futures = collections.deque(_Slot.restored(s) for s in state["futures"])
        self._closed = False

    # ------------------------------------------------------------------ lifetime
    def _stop_workers(self):
        with self._lock:
            self._closed = True
            self._tasks.clear()
            self._task_ready.notify_all()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout=JOIN_TIMEOUT)
        self._threads = []

    def _close_slots(self):
        for slot in self._all_slots():
            if slot.iterator is not None:
                slot.iterator.close()
                slot.iterator = None

    def children(self):
        return [self.input] + [s.iterator for s in self._all_slots() if s.iterator is not None]

    def close(self):
        self._stop_workers()
        self._close_slots()
        super().close()
