"""A thread pool whose parallelism can be tuned while it runs.

``concurrent.futures.ThreadPoolExecutor`` runs every submitted task as soon as it has an idle thread, so a
stage with two threads and two blocks in flight runs two at once whatever its tuner says. Here the pool
keeps ``threads`` threads, but at most ``limit`` of them run tasks at a time; the others wait between tasks.
Tasks beyond the limit stay queued, where the consumer can take them back (``Future.cancel()`` succeeds on a
task no thread has started) and run them itself. ``limit`` can go up and down at any time.

Tasks are ``concurrent.futures.Future`` objects, so ``done``/``result``/``cancel``/``running`` and done
callbacks work as usual.
"""

from __future__ import annotations

import collections
import threading
from concurrent.futures import Future

from ..iterators.base import finalizing


def thread_cap(ctx) -> int | None:
    """``Options.threading.private_threadpool_size``: the most threads one parallel stage of this pipeline may
    run its work on (map and interleave workers, parallel batch), or None when unset (0 means unset, as in
    tf.data). A stage asked for more parallelism keeps that many tasks in flight, but runs at most this many
    at once; AUTOTUNE never tunes past it. tf.data's cap is one pool shared by the whole pipeline; here each
    stage has its own (docs/deliberate-differences.md)."""
    cap = ctx.options.threading.private_threadpool_size
    return cap or None  # (Options refuses a negative value when it is set)


def stage_threads(ctx, wanted: int, unbounded: bool = False) -> int:
    """Threads a parallel stage that wants ``wanted`` may start: at most ``thread_cap`` unless the stage asked
    for threads of its own (``map(use_unbounded_threadpool=True)``)."""
    cap = None if unbounded else thread_cap(ctx)
    return max(1, wanted if cap is None else min(wanted, cap))


class TunedPool:
    def __init__(self, threads: int, limit: int, name: str):
        self._size = max(1, threads)
        self._limit = max(1, limit)
        self._name = name
        self._cond = threading.Condition()
        self._queue: collections.deque = collections.deque()
        self._threads: list = []
        self._running = 0
        self._closed = False

    @property
    def limit(self) -> int:
        return self._limit

    @limit.setter
    def limit(self, value: int) -> None:
        value = max(1, int(value))
        if value != self._limit:
            with self._cond:
                self._limit = value
                self._cond.notify_all()

    def submit(self, fn, *args) -> Future:
        future = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("submit on a closed pool")
            self._queue.append((future, fn, args))
            if len(self._threads) < min(self._size, self._limit):
                t = threading.Thread(target=self._work, name=f"{self._name}_{len(self._threads)}", daemon=True)
                t.start()
                self._threads.append(t)
            self._cond.notify()
        return future

    def _work(self):
        while True:
            with self._cond:
                while not self._closed and (not self._queue or self._running >= self._limit):
                    self._cond.wait()
                if self._closed:
                    return
                future, fn, args = self._queue.popleft()
                if not future.set_running_or_notify_cancel():  # taken back by the consumer
                    continue
                self._running += 1
            try:
                result = fn(*args)
            except BaseException as e:  # noqa: BLE001 - delivered through the future
                future.set_exception(e)
            else:
                future.set_result(result)
            finally:
                with self._cond:
                    self._running -= 1
                    self._cond.notify()  # one slot freed: one waiting thread may take a task (waking them
                    # all would make the parked ones contend for the GIL at every task)

    def shutdown(self) -> None:
        """Stop the threads after their current task; queued tasks are cancelled. Never waits.

        While the interpreter finalizes it takes no lock at all: a thread stopped for good inside the pool's
        locked section (see ``base.finalizing``) holds the lock forever, and nothing will run a task again."""
        self._closed = True  # a thread checks it under the lock before every task
        if finalizing():
            return
        with self._cond:
            for future, _, _ in self._queue:
                future.cancel()
            self._queue.clear()
            self._cond.notify_all()
