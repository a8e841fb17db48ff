"""AUTOTUNE: run-time sizing of parallelism and buffers from the consumer's measured wait.

The algorithm (one ``Tuner`` per AUTOTUNE knob -- a parallel map's parallelism, a prefetch buffer):

1. The stage measures, only when it is autotuned, how long its consumer blocks waiting for it
   (``waited(seconds)``); ``tick()`` is called once per delivered block.
2. Every ``WINDOW`` seconds of wall time the tuner computes the wait fraction ``waited / elapsed``.
   If the consumer waited more than ``RAISE_ABOVE`` of the window, the stage is the limit: the knob goes up
   (parallelism by one, buffers double), never beyond its budget.
3. The knob never goes down: the budgets bound it, and a stage that stops being the bottleneck costs only
   idle threads or buffer memory already accounted for.

Budgets: parallelism is at most ``Options.autotune.cpu_budget`` (default: the CPUs this process may use);
a prefetch buffer holds at most ``Options.autotune.ram_budget`` bytes (default: half the machine's memory)
estimated from the size of the elements seen. ``Options.autotune.enabled = False`` pins every knob at its
budget (parallelism) or its initial value (buffers), which is how a bench compares hand-picked settings.
"""

from __future__ import annotations

import os
import time

WINDOW = 0.02
RAISE_ABOVE = 0.05


class Tuner:
    def __init__(self, initial: int, maximum: int, grow=lambda v: v + 1, clock=time.perf_counter):
        self._clock = clock
        self.value = max(1, min(initial, maximum))
        self.maximum = max(1, maximum)
        self._grow = grow
        self._waited = 0.0
        self._start = clock()
        self.raises = 0  # how many times the knob went up (for statistics and tests)

    def waited(self, seconds: float) -> None:
        self._waited += seconds

    def tick(self) -> None:
        now = self._clock()
        elapsed = now - self._start
        if elapsed < WINDOW:
            return
        if self._waited > RAISE_ABOVE * elapsed and self.value < self.maximum:
            self.value = min(self.maximum, self._grow(self.value))
            self.raises += 1
        self._waited = 0.0
        self._start = now


def ram_budget(options) -> int:
    budget = options.autotune.ram_budget
    if budget:
        return budget
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError, AttributeError):
        return 1 << 30


def element_bytes(element) -> int:
    """Bytes an element holds in its array leaves (an estimate for buffer budgets)."""
    from .. import structure

    return sum(getattr(x, "nbytes", 8) for x in structure.flatten(element)) or 8


def enabled(options) -> bool:
    return options.autotune.enabled is not False
