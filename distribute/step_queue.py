"""``StepQueue``: the bounded hand-off between the distributed iterator's prefetch thread and its consumer.

A ``queue.Queue`` with one addition: a producer that finds the queue full can do other work while it waits
for room (``put(..., while_full=...)``). The distributed iterator's thread, which reads the pipeline's output
prefetch itself (``prefetch_takeover.py``), reads ahead into that prefetch's buffer then, as the prefetch's own
thread would have: the pipeline's run-ahead stays what it was, with one thread instead of two.

(Waking the consumer once per full queue instead of once per step was measured too: half the context
switches per step on P7, but the training-loop stall check got worse on the busy 2-core machine, so a
consumer that finds the queue empty waits for one step, as before.)
"""

from __future__ import annotations

import collections
import threading
from typing import Callable


class StepQueue:
    def __init__(self, capacity: int):
        self.capacity = max(1, int(capacity))
        self._items: collections.deque = collections.deque()
        self._cond = threading.Condition(threading.Lock())
        self._consumer_waiting = False
        self._producer_waiting = False

    def put(self, item, stop: threading.Event, while_full: Callable[[], bool] | None = None) -> bool:
        """Append ``item`` once there is room; False (nothing put) when ``stop`` is set first. While the queue
        is full, ``while_full()`` is called (without the queue's lock) as long as it says it did something;
        then the producer waits."""
        while True:
            with self._cond:
                if len(self._items) < self.capacity:
                    self._items.append(item)
                    if self._consumer_waiting:
                        self._cond.notify()
                    return True
                if stop.is_set():
                    return False
                if while_full is None:
                    self._producer_waiting = True
                    self._cond.wait(0.05)  # (stop is set without a notify: look again now and then)
                    self._producer_waiting = False
                    continue
            if not while_full():
                while_full = None  # nothing more to do: wait

    def get(self):
        """The oldest item, waiting for one if there is none."""
        with self._cond:
            if not self._items:
                self._consumer_waiting = True
                try:
                    while not self._items:
                        self._cond.wait()
                finally:
                    self._consumer_waiting = False
            item = self._items.popleft()
            if self._producer_waiting:
                self._cond.notify()
            return item

    def drain(self) -> list:
        """Every item not taken yet, oldest first."""
        with self._cond:
            items = list(self._items)
            self._items.clear()
            if self._producer_waiting:
                self._cond.notify()
            return items

    def empty(self) -> bool:
        return not self._items
