"""AUTOTUNE: run-time sizing of parallelism and buffers by measured waiting and measured throughput.

The algorithm (one ``Tuner`` per AUTOTUNE knob -- a parallel map's or an interleave's parallelism):

1. The stage measures, only when it is autotuned, how long its consumer blocks waiting for it
   (``waited(seconds)``) and how many elements it delivers (``tick(delivered)``, once per delivered block).
2. Every ``WINDOW`` seconds of wall time the tuner judges the window. If the consumer waited more than
   ``RAISE_ABOVE`` of it, the stage is the limit and the tuner *probes* one step up (parallelism + 1),
   remembering the delivery rate before the step.
3. A probe is judged on its own rate: one window to settle, then ``JUDGE_WINDOWS`` windows measured. If the
   rate rose by at least ``GAIN`` the step is kept (and the next window may probe again); otherwise the
   knob goes back down and stays there for ``RETRY_AFTER`` seconds (doubling after each failed probe). This
   is what tells work that scales with threads (I/O, numpy that releases the GIL) from work that holds the
   GIL: on a 2-core machine a second thread running Python code makes a stage slower, and the probe sees it.
4. One probe at a time per iterator tree (a ``ProbeToken`` shared through the iterator context), so a rate
   change is blamed on the knob that moved.

A tuner that is never told deliveries (``tick()`` with no count) has no rate to judge by and keeps every
step it takes: the knob rises while the consumer waits, as in step 2, and never goes down.

Budgets: parallelism is at most ``Options.autotune.cpu_budget`` (default: the CPUs this process may use);
a prefetch buffer (``prefetch.py``, which sizes itself from its consumer's waits, not with a ``Tuner``)
holds at most ``Options.autotune.ram_budget`` bytes (default: half the machine's memory) estimated from
the size of the elements seen. ``Options.autotune.enabled = False`` pins every knob at its budget
(parallelism) or its initial value (buffers), which is how a bench compares hand-picked settings.
"""

from __future__ import annotations

import os
import threading
import time

WINDOW = 0.02
RAISE_ABOVE = 0.05
JUDGE_WINDOWS = 2  # windows measured after a step (after one window to settle)
GAIN = 0.05  # a step must raise the delivery rate by this much to be kept
RETRY_AFTER = 0.5  # seconds before a failed step is tried again (doubles after each failure)


class ProbeToken:
    """Lets one tuner of an iterator tree probe at a time."""

    def __init__(self):
        self._lock = threading.Lock()
        self.holder = None

    def acquire(self, tuner) -> bool:
        with self._lock:
            if self.holder is None or self.holder is tuner:
                self.holder = tuner
                return True
            return False

    def release(self, tuner) -> None:
        with self._lock:
            if self.holder is tuner:
                self.holder = None


def probe_token(ctx) -> ProbeToken:
    """The probe token of ``ctx``'s iterator tree."""
    return ctx._shared.setdefault("autotune_probe", ProbeToken())


class Tuner:
    def __init__(self, initial: int, maximum: int, grow=lambda v: v + 1, clock=time.perf_counter, token=None):
        self._clock = clock
        self.value = max(1, min(initial, maximum))
        self.maximum = max(1, maximum)
        self._grow = grow
        self._token = token if token is not None else ProbeToken()
        self._waited = 0.0
        self._count = 0
        self._start = clock()
        self._last_rate = None  # delivery rate of the last steady window
        # a probe in progress: (value before the step, rate before it, windows left to settle, counts)
        self._probe = None
        self._retry_at = 0.0
        self._retry_after = RETRY_AFTER
        self.raises = 0  # how many steps up were kept (for statistics and tests)
        self.reverts = 0  # how many steps were taken back because they did not pay

    def waited(self, seconds: float) -> None:
        self._waited += seconds

    def tick(self, delivered: int = 0) -> None:
        self._count += delivered
        now = self._clock()
        elapsed = now - self._start
        if elapsed < WINDOW:
            return
        rate = self._count / elapsed if self._count else None
        waited = self._waited > RAISE_ABOVE * elapsed
        self._waited, self._count, self._start = 0.0, 0, now
        if self._probe is not None:
            self._judge(rate, elapsed, now)
            return
        self._last_rate = rate
        if waited and self.value < self.maximum and now >= self._retry_at and self._token.acquire(self):
            self._probe = [self.value, rate, 1, 0.0, 0.0]  # before, its rate, settle, measured count, time
            self.value = min(self.maximum, self._grow(self.value))

    def _judge(self, rate, elapsed, now):
        probe = self._probe
        before, base = probe[0], probe[1]
        if probe[2] > 0:  # settling: the new threads start, buffers refill
            probe[2] -= 1
            return
        probe[3] += (rate or 0.0) * elapsed
        probe[4] += elapsed
        if probe[4] < JUDGE_WINDOWS * WINDOW * 0.999:
            return
        self._probe = None
        self._token.release(self)
        measured = probe[3] / probe[4] if probe[3] else None
        if base is None or measured is None or measured >= base * (1 + GAIN):
            self.raises += 1
            self._last_rate = measured
            self._retry_after = RETRY_AFTER
            return
        self.value = before  # the step did not pay: back down, and wait before trying again
        self.reverts += 1
        self._retry_at = now + self._retry_after
        self._retry_after *= 2

    def close(self) -> None:
        """Give the probe token back (a closed stage must not block its siblings' tuning)."""
        self._token.release(self)


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
