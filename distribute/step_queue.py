"""``StepQueue``: the bounded hand-off between the distributed iterator's prefetch thread and its consumer.

Each wake-up of a waiting thread costs far more than the bookkeeping around it: on a machine with few cores
the woken thread preempts the one that woke it and both fight for the GIL (measured on P7, 8 CPU devices,
2 cores: ~3 voluntary context switches per step with ``queue.Queue``). So the hand-off wakes as seldom as the
bound allows:

- a consumer that finds the queue empty while the producer is the slower side (the queue has not been full
  since the consumer last waited, except while it waited) waits until the queue is full (or the producer put
  its last item: the end or an error), then takes the steps one by one without waiting: one wake-up per
  ``capacity`` steps. The producer never waits meanwhile (the queue is not full), so the throughput is the
  producer's, as with a wake-up per step;
- a consumer that finds it empty after the producer had kept up (the queue filled while the consumer was
  busy: a training loop, and the producer fell behind once) waits for one step only, so the wait is as short
  as it can be;
- a producer that finds the queue full waits until the consumer has taken a step; a consumer that keeps up
  (the usual training loop) finds steps ready and never waits.

A taken step is in the consumer's hands at once; ``drain`` (used when the iterator halts) takes what is left.
"""

from __future__ import annotations

import collections
import threading


class StepQueue:
    def __init__(self, capacity: int):
        self.capacity = max(1, int(capacity))
        self._items: collections.deque = collections.deque()
        self._cond = threading.Condition(threading.Lock())
        self._consumer_wants = 0  # items the waiting consumer waits for (0: not waiting)
        self._producer_waiting = False
        self._last_put = False  # the producer put its last item (the end or an error)
        # the queue was full while the consumer was not waiting, since it last waited: the producer keeps up
        self._kept_up = True

    def put(self, item, stop: threading.Event, last: bool = False) -> bool:
        """Append ``item`` once there is room; False (nothing put) when ``stop`` is set first. ``last``: no
        item follows (the end, an error): a waiting consumer is woken whatever it waits for."""
        with self._cond:
            while len(self._items) >= self.capacity:
                if stop.is_set():
                    return False
                self._producer_waiting = True
                self._cond.wait(0.05)  # (stop is set without a notify: look again now and then)
                self._producer_waiting = False
            self._items.append(item)
            self._last_put = self._last_put or last
            if len(self._items) >= self.capacity and not self._consumer_wants:
                self._kept_up = True
            if self._consumer_wants and (len(self._items) >= self._consumer_wants or self._last_put):
                self._cond.notify()
        return True

    def get(self):
        """The oldest item; when there is none, wait for one (the producer kept up) or until the queue is full
        (it did not), or until the last item is in."""
        with self._cond:
            if not self._items:
                self._consumer_wants = 1 if self._kept_up else self.capacity
                self._kept_up = False
                try:
                    while not self._last_put and len(self._items) < self._consumer_wants:
                        self._cond.wait()
                finally:
                    self._consumer_wants = 0
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
