"""``OverlapJudge``: does a producer thread pay for the stage it runs ahead of?

A prefetch's thread (and the distributed iterator's thread that places steps on the devices) overlaps making
the next element with what its consumer does between calls. When the consumer does next to nothing between
calls -- a loop that drains the pipeline into a file, an evaluation loop whose device work is dispatched
asynchronously, a benchmark -- there is nothing to overlap with, and the thread only adds its hand-off: on a
2-core machine each element that crossed threads cost 50-150 us of CPU (the GIL changing hands, a condition's
notify, 3-6 context switches), more than the whole P2 batch takes to make (30 us). A consumer that does nothing
gets elements exactly as fast from its own thread, minus that cost.

So such a stage serves *on demand* -- the input is read on the consumer's thread when it asks, as if the stage
were not there -- while the consumer's time away between calls stays under ``TO_DEMAND`` of the time making
what it took, and goes back to its thread once that share grows over ``TO_THREAD``: the thread pays when the
consumer's work can hide production, and a few percent of overlap does not repay the hand-off. Values,
order, errors and saved state are the same either way; only the thread that reads the input changes.

Hysteresis: the thresholds differ, each decision needs a window of observations, and every return to the
thread doubles the window the next move to demand needs, so a consumer that keeps changing its pattern (or
two stages judging each other's timing) costs at most a window each way, less and less often.

The judge is pure arithmetic over the seconds it is given; the stages time themselves with ``clock`` (tests
replace it with a fake one).
"""

from __future__ import annotations

import time

clock = time.perf_counter

TO_DEMAND = 0.10  # away / making below this, over a window: serve on demand
TO_THREAD = 0.30  # away / making above this, over a window: back to the thread
WINDOW = 16  # observations per decision (the first one)
MAX_WINDOW = 4096


class OverlapJudge:
    """Fed one observation per call a stage served from what it made: the consumer's seconds away since the
    previous call, and the seconds making what the call served took. ``on_demand`` says how to serve."""

    __slots__ = ("on_demand", "window", "_n", "_away", "_making", "moves", "last_ratio")

    def __init__(self, window: int = WINDOW):
        self.on_demand = False
        self.window = window
        self._n = 0
        self._away = 0.0
        self._making = 0.0
        self.moves = 0  # mode changes so far
        self.last_ratio: float | None = None  # away / making over the last full window

    def observe(self, away: float, making: float) -> bool:
        """Add one observation; True when it changed ``on_demand``. Nothing measured either way (a clock too
        coarse for the call) tells nothing and is not counted."""
        if away <= 0.0 and making <= 0.0:
            return False
        self._n += 1
        self._away += away
        self._making += making
        if self._n < self.window:
            return False
        ratio = self._away / self._making if self._making > 0 else float("inf")
        self.last_ratio = ratio
        self._n, self._away, self._making = 0, 0.0, 0.0
        if not self.on_demand and ratio < TO_DEMAND:
            self.on_demand = True
        elif self.on_demand and ratio > TO_THREAD:
            self.on_demand = False
            self.window = min(MAX_WINDOW, 2 * self.window)
        else:
            return False
        self.moves += 1
        return True

    def describe(self, what: str = "element") -> str:
        ratio = "" if self.last_ratio is None else f", consumer away {100 * self.last_ratio:.0f}% of the time " \
                                                    f"making each {what} took"
        if self.on_demand:
            return f"on demand (read on the consumer's thread: it does next to nothing between calls{ratio})"
        if self.moves:
            return f"thread (back from on demand: the consumer works between calls{ratio})"
        return f"thread{ratio}"
