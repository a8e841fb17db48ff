"""AUTOTUNE: run-time sizing of parallelism and buffers by measured waiting and measured throughput.

The algorithm (one ``Tuner`` per AUTOTUNE knob -- the parallelism of a thread map, of an interleave, and
the number of a process map's workers given tasks):

1. The stage measures, only when it is autotuned, how long its consumer blocks waiting for it
   (``waited(seconds)``) and how many elements it delivers (``tick(delivered)``, once per delivered block).
2. Every ``WINDOW`` seconds of wall time -- longer until the window holds ``MIN_DELIVERIES`` delivered
   blocks, up to ``MAX_WINDOW``, so a rate is never judged on one or two slow batches -- the tuner judges
   the window. If the consumer waited more than ``RAISE_ABOVE`` of it, the stage is the limit and the tuner
   *probes* one step up (parallelism + 1), remembering the delivery rate before the step: the mean of the
   last ``BASE_WINDOWS`` windows at the current value (none is probed before it has them, so start-up
   windows never serve as a base).
3. A probe is judged on its own rate: one window to settle, then ``JUDGE_WINDOWS`` windows measured (a
   step up whose measured rate falls ``GAIN`` below the base is taken back at once). If the
   rate rose by at least ``GAIN`` the step is kept (and the next window may probe again); otherwise the
   knob goes back down and stays there for ``RETRY_AFTER`` seconds (doubling after each failed probe). This
   is what tells work that scales with threads (I/O, numpy that releases the GIL) from work that holds the
   GIL: on a 2-core machine a second thread running Python code makes a stage slower, and the probe sees it.
   ``DOWN_AFTER`` seconds after a kept step (and from a starting value above one -- an AUTOTUNE interleave
   starts at two -- as soon as there is a base), a step *down* is probed the same way and kept if the rate
   stays within ``HOLD``: a step kept on a lucky window is taken back, and the knob settles where fewer
   threads would do worse. A fused map and batch may step down to 0: its batches are then made on the
   consumer's thread (its time making them counts as waiting, so a step back up is probed; from 0 it goes
   to 2 threads: one would only make the same batches elsewhere, at the same rate, and never pay).
   Where both directions are due and a step up already failed from the current value, the step down goes
   first; a knob made ``down_first`` (an interleave, which starts at two readers) treats its start so too,
   and its step down probes its minimum until a step down has failed (then one at a time). The first
   ``WARMUP_WINDOWS`` windows (start-up) are never a base.
4. One probe at a time per iterator tree (a ``ProbeToken`` shared through the iterator context), so a rate
   change is blamed on the knob that moved.
5. Tuning carries over from one epoch to the next. A ``Dataset`` keeps what its iterators' tuners learned
   (``learned``): after each verdict a tuner records its value and its back-off times (how long until it
   probes up, and down, again), and the next iterator of the same ``Dataset`` -- the next epoch of a
   training loop -- starts from them instead of from scratch. A step that failed keeps failing less often
   (its back-off doubles up to ``MAX_BACKOFF``), so a steady pipeline pays for probes less and less
   often, and one whose machine gets busier or quieter is still probed every ``MAX_BACKOFF`` seconds at
   most: a back-off runs on in time across epochs (the next iterator probes when it ends, however short
   its epochs), so a knob that start-up noise moved the wrong way is found again. What a judgement has measured
   carries over too, so epochs shorter than one judgement still tune: the steady rates at the current value
   (the next epoch's base needs fewer windows of its own), and a probe that the epoch's end cut short, which
   the next epoch resumes at the probed value -- its first window settling, as after any step -- and judges on
   what both epochs measured. A restored tuner's start-up is ``RESTORED_WARMUP`` windows, not
   ``WARMUP_WINDOWS``. Nothing measured in a Dataset's first epoch (a tuner from scratch) is carried: that
   epoch is slower throughout, and a later rate judged against its base looks like a gain. A P3 read stage's
   epoch (~80 ms) was over before a fresh tuner had its first base (three start-up windows and two steady ones,
   100 ms): its two reader threads were never judged, at 1.7 GB/s where reading on the consumer gave 2.5. A
   probe still unjudged after ``MAX_CARRIED`` epochs (epochs too short for any window) counts as failed: the
   knob goes back and the direction waits twice as long. Knobs are matched by their node's place in the
   optimized graph; stages built inside an interleave's function (one per input) start from scratch.

A tuner that is never told deliveries (``tick()`` with no count) has no rate to judge by and keeps every
step it takes: the knob rises while the consumer waits, as in step 2, and never goes down.

Budgets: parallelism is at most ``Options.autotune.cpu_budget`` (default: the CPUs this process may use)
and, for a thread stage, ``Options.threading.private_threadpool_size`` (``pool.stage_threads``: a stage's
``maximum`` comes capped; a process map's workers are not threads and are not capped);
a prefetch buffer (``prefetch.py``, which sizes itself from its consumer's waits, not with a ``Tuner``)
holds at most ``Options.autotune.ram_budget`` bytes (default: half the machine's memory) estimated from
the size of the elements seen. ``Options.autotune.enabled = False`` pins every knob at its budget
(parallelism) or its initial value (buffers), which is how a bench compares hand-picked settings.
"""

from __future__ import annotations

import os
import sys
import threading
import time

WINDOW = 0.02
RAISE_ABOVE = 0.05
JUDGE_WINDOWS = 3  # windows measured after a step (after one window to settle)
GAIN = 0.2  # a step must raise the delivery rate by this much to be kept (window rates vary by ~10%)
BASE_WINDOWS = 2  # steady windows at a value before a probe from it (their mean rate is the base)
RETRY_AFTER = 0.5  # seconds before a failed step up is tried again (doubles after each failure)
WARMUP_WINDOWS = 3  # the first windows of a stage are start-up, never a base rate
RESTORED_WARMUP = 1  # ...of a stage whose tuner starts from what the last epoch's learned (step 5)
MAX_CARRIED = 3  # epochs a cut-short probe is resumed in before it counts as failed (step 5)
DOWN_AFTER = 0.3  # seconds after a kept step before a step down is probed (doubles when it fails)
HOLD = 0.1  # a step down is kept if the rate stays within this of the base (window rates vary by ~10%)
MIN_DELIVERIES = 3  # a window lasts until the stage has delivered this many blocks: a stage that delivers one
# 18 ms batch (P4) saw 0 or 1 batch per 20 ms window, and a probe judged on such rates was noise (taken back
# at once as "clearly worse", so AUTOTUNE never found the second thread that made it 35% faster)...
MAX_WINDOW = 0.25  # ...or this long (a stage that stalls, delivering nothing, is still judged)
MAX_BACKOFF = 60.0  # seconds: the longest a tuner waits before probing a direction that failed again


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


def learned_slot(ctx, node):
    """Where the tuner of ``node`` keeps what it learns for the next iterator of the same Dataset: (store,
    key), or None for a node outside the iterated graph (a stage built inside an interleave's function)."""
    learned = ctx._shared.get("autotune_learned")
    if learned is None:
        return None
    store, places = learned
    place = places.get(id(node))
    return None if place is None else (store, (place, node.kind))


def tuner_for(node, ctx, initial: int, maximum: int, clock=time.perf_counter, minimum: int = 1,
              down_first: bool = False) -> "Tuner":
    """The tuner of ``node``'s AUTOTUNE knob in ``ctx``'s tree: one probe at a time (the tree's token),
    starting from what the previous iterator of the same Dataset learned, if any (``down_first``: see
    ``Tuner``)."""
    return Tuner(initial, maximum, clock=clock, token=probe_token(ctx), learned=learned_slot(ctx, node),
                 minimum=minimum, down_first=down_first)


class Tuner:
    def __init__(self, initial: int, maximum: int, grow=lambda v: v + 1, clock=time.perf_counter, token=None,
                 learned=None, minimum: int = 1, down_first: bool = False):
        self._clock = clock
        # the least value a step down may reach: 1 thread, or 0 for a stage that can run its work on its
        # consumer's thread (the fused map and batch: a function that holds the GIL gains nothing from a
        # thread and pays its hand-offs)
        self.minimum = max(0, min(minimum, 1))
        self.value = max(1, min(initial, maximum))
        self.maximum = max(1, maximum)
        self._grow = grow
        self._token = token if token is not None else ProbeToken()
        self._waited = 0.0
        self._count = 0
        self._deliveries = 0  # ticks with a count in this window
        self._start = clock()
        self._windows = 0  # windows judged so far (the first ``_warmup`` are start-up: never a base)
        self._warmup = WARMUP_WINDOWS
        self._carried = 0  # epochs the probe in progress has been carried into (step 5)
        # The value a step up last failed from. There, when a step down is due too, it goes first: a stage
        # whose consumer waits although its threads cost more than they bring (P3's read stage: two GIL-bound
        # readers, 1.8 GB/s against 2.6 on the consumer alone) would otherwise probe up whenever its back-off
        # had run out -- at every epoch, when epochs are seconds apart -- and the step down waited behind it.
        self._up_failed = None
        self._steady: list = []  # delivery rates of the steady windows since the knob last moved
        self._probe = None  # a probe in progress: see _begin
        self._retry_at = 0.0  # no step up before (after a step up that did not pay, or a kept step down)
        self._retry_after = RETRY_AFTER
        self._down_at = 0.0  # no step down before
        self._down_after = DOWN_AFTER
        self.raises = 0  # how many steps up were kept (for statistics and tests)
        self.reverts = 0  # how many steps up were taken back because they did not pay
        self.lowers = 0  # how many steps down were kept because the rate held
        self._learned = learned  # (store, key): see step 5 of the module docstring
        remembered = learned[0].get(learned[1]) if learned is not None else None
        # A tuner from scratch runs in a Dataset's first epoch, slower throughout for reasons no knob changes
        # (first opens, imports, cold caches: P3's read stage 0.6-1.2 GB/s against 1.5-3 after): its rates are
        # no base for a later epoch's, and its cut-short probe is dropped rather than resumed (resumed, a
        # step up was judged against the first epoch's base and kept on that alone).
        self._restored = remembered is not None
        if remembered is not None:
            value, self._retry_after, self._down_after, *rest = remembered
            due, carried = rest[:2], (rest[2] if len(rest) > 2 else None)
            self.value = max(self.minimum, min(value, self.maximum))
            self._warmup = RESTORED_WARMUP
            # A back-off runs on across epochs: a probe is due when the last iterator's back-off ends, not a
            # whole back-off after this one starts. Counted from each start, a back-off longer than an epoch
            # (P4's: ~1 s) put the probe off for good, and a knob that start-up noise had moved the wrong
            # way stayed there (P4 as ported at 0 threads, 16k img/s against 25k at 2). At most a back-off
            # from now (a learned time from another clock is not trusted further).
            self._retry_at = self._start + self._retry_after
            self._down_at = self._start + self._down_after
            if due:
                self._retry_at = min(self._retry_at, due[0])
                self._down_at = min(self._down_at, due[1])
            if carried is not None:
                self._resume(*carried)
        # ``down_first``: a knob that starts generously (an interleave's two readers) probes fewer before more
        # where both are due, as where a step up failed, until a step up fails somewhere (then that value)
        if down_first and self._up_failed is None:
            self._up_failed = self._probe[0] if self._probe is not None else self.value
        self._jump_down = down_first  # ...and its step down goes to its minimum at first (``_step_down``)

    def _remember(self, probe=None) -> None:
        """Record the value (the last verdict), the back-offs and what the next epoch carries on with: the
        steady rates at this value and ``probe``, a cut-short probe to resume (``close``)."""
        if self._learned is not None:
            store, key = self._learned
            steady = tuple(self._steady) if self._restored else ()
            carried = (steady, probe, self._carried + 1 if probe is not None else 0, self._up_failed)
            store[key] = (self.value, self._retry_after, self._down_after, self._retry_at, self._down_at, carried)

    def _resume(self, steady, probe, carried, up_failed=None) -> None:
        """Carry on from the last epoch (step 5 of the module doc): its steady rates, and its cut-short probe
        when there was one (``probe``: the probed value, the value before, the base rate, the elements and
        seconds measured), unless the value it probes is no longer within bounds or another knob of this
        tree holds the probe token."""
        self._steady = list(steady)[-BASE_WINDOWS:]
        self._up_failed = up_failed
        if probe is None:
            return
        target, before, base, elements, seconds = probe
        target = max(self.minimum, min(target, self.maximum))
        if before != self.value or target == before or not self._token.acquire(self):
            return
        self._probe = [before, base, 1, elements, seconds]  # its first window here settles, as after a step
        self.value = target
        self._steady = []
        self._carried = carried

    def waited(self, seconds: float) -> None:
        self._waited += seconds

    def tick(self, delivered: int = 0) -> None:
        self._count += delivered
        if delivered:
            self._deliveries += 1
        now = self._clock()
        elapsed = now - self._start
        if elapsed < WINDOW * 0.999:  # (a clock stepping by exactly WINDOW may land a hair short)
            return
        if self._deliveries < MIN_DELIVERIES and elapsed < MAX_WINDOW * 0.999:
            return  # too few deliveries for a rate: the window runs on (see MIN_DELIVERIES)
        rate = self._count / elapsed if self._count else None
        waited = self._waited > RAISE_ABOVE * elapsed
        self._waited, self._count, self._deliveries, self._start = 0.0, 0, 0, now
        self._windows += 1
        if self._probe is not None:
            self._judge(rate, elapsed, now)
            if self._probe is None:  # a verdict: the next epoch starts from it
                self._remember()
            return
        if rate is not None and self._windows <= self._warmup:
            return  # start-up: slow for reasons no knob changes
        self._steady = (self._steady + [rate])[-BASE_WINDOWS:]
        if len(self._steady) < BASE_WINDOWS and any(r is not None for r in self._steady):
            return  # no base yet
        base = None if None in self._steady else sum(self._steady) / len(self._steady)
        up = waited and self.value < self.maximum and now >= self._retry_at
        down = base is not None and self.value > self.minimum and now >= self._down_at
        if up and down and self._up_failed == self.value:
            up = False  # more did not pay from here: fewer is tried first (see _up_failed)
        if up:
            self._begin(self._step_up(), base)
        elif down:
            self._begin(self._step_down(), base)  # a kept step may have been luck: see if fewer do as well

    def _step_up(self) -> int:
        """The value a step up probes. From 0 (the consumer does the stage's work) it is 2 threads where the
        budget allows: one thread only does the same work elsewhere, at the same rate when the consumer has
        nothing else to do, so a probe of 1 never pays and parallelism would never be tried again (P4 with
        a per-element generator sat at 0 for good: 15.5k img/s against 24.8k on two threads). One thread is
        still reached from 2, by the step down, where it does as well (it overlaps the consumer's own work)."""
        if self.value == 0 and self.maximum >= 2:
            return max(2, self._grow(0))
        return self._grow(self.value)

    def _step_down(self) -> int:
        """The value a step down probes: one less, or for a ``down_first`` knob the minimum itself until a step
        down has failed (its back-off doubled). A generous start (an interleave's two readers) is either right
        or far off: reads that hold the GIL are fastest on the consumer alone (P3's read stage: 2.0 M records/s
        at 0 readers, 1.6-1.7 at 1 or 2), and going there one reader at a time took two verdicts of about two
        short epochs each, so half of a bench's nine epochs ran before it got there. Where the minimum does
        worse, that probe fails and later steps go one at a time (1 is still found)."""
        if self._jump_down and self._down_after <= DOWN_AFTER:  # (it only grows, when a step down fails)
            return self.minimum
        return self.value - 1

    def _begin(self, value, base):
        if not self._token.acquire(self):
            return
        # before, its rate, windows left to settle, measured elements, measured seconds
        self._probe = [self.value, base, 1, 0.0, 0.0]
        self.value = min(self.maximum, value)
        self._steady = []
        self._carried = 0

    def _judge(self, rate, elapsed, now):
        probe = self._probe
        before, base = probe[0], probe[1]
        if probe[2] > 0:  # settling: the new threads start, buffers refill. Not judged at all: a stage that
            # delivers a batch per ~20 ms (P4) looked "clearly worse" in almost every settling window, and
            # every step up was taken back however much the second thread paid
            probe[2] -= 1
            return
        probe[3] += (rate or 0.0) * elapsed
        probe[4] += elapsed
        clearly_worse = (self.value > before and base is not None and probe[3]
                         and probe[3] / probe[4] < base * (1 - GAIN))  # no need to sit out the whole probe
        if probe[4] < JUDGE_WINDOWS * WINDOW * 0.999 and not clearly_worse:
            return
        self._probe = None
        self._token.release(self)
        measured = probe[3] / probe[4] if probe[3] else None
        if self.value > before:  # a step up: kept only if the rate rose by GAIN
            if base is None or measured is None or measured >= base * (1 + GAIN):
                self.raises += 1
                self._retry_after = RETRY_AFTER
                self._down_at = now + DOWN_AFTER
                return
            self.value = before
            self.reverts += 1
            self._up_failed = before
            self._retry_at = now + self._retry_after
            if measured is None or measured < base * (1 + GAIN / 2):
                self._retry_after = _longer(self._retry_after)
            # else: a gain, only short of GAIN -- on a noisy machine one unlucky judgement in three windows.
            # Retried as soon as the last failure: doubled, such verdicts kept P4's second thread away for
            # good (a sweep's AUTOTUNE epochs at the one-thread rate, 11k img/s against 15k at 2, all nine)
        else:  # a step down: kept if the rate held (less parallelism for the same work)
            if measured is not None and measured >= base * (1 - HOLD):
                self.lowers += 1
                self._retry_at = now + self._retry_after
                self._retry_after = _longer(self._retry_after)
                self._down_at = now + DOWN_AFTER
                return
            self.value = before
            self._down_at = now + self._down_after
            self._down_after = _longer(self._down_after)

    def close(self) -> None:
        """Give the probe token back (a closed stage must not block its siblings' tuning), and leave what the
        next epoch carries on with (step 5 of the module doc). A probe cut short -- the epoch ended in it --
        has no verdict: the knob goes back to its last verdict here, and the next epoch resumes the probe
        where this one left it. One still unjudged after ``MAX_CARRIED`` epochs counts as failed: the
        direction waits twice as long before it is tried again (epochs too short to judge anything stop
        paying for it).

        While the interpreter finalizes it does nothing: the token's lock may be held by a thread stopped for
        good (see ``base.finalizing``), and no later epoch will use what it learned."""
        if sys.is_finalizing():
            return
        probe, carry = self._probe, None
        if probe is not None:
            self._probe = None
            if not self._restored:
                pass  # the first epoch's: dropped, not failed (see __init__)
            elif self._carried < MAX_CARRIED:
                carry = (self.value, probe[0], probe[1], probe[3], probe[4])
            else:
                now = self._clock()
                if self.value > probe[0]:
                    self._retry_after = _longer(self._retry_after)
                    self._retry_at = now + self._retry_after
                    self._up_failed = probe[0]
                else:
                    self._down_after = _longer(self._down_after)
                    self._down_at = now + self._down_after
            self.value = probe[0]
        self._remember(carry)
        self._token.release(self)


def _longer(backoff: float) -> float:
    """The back-off after another failed probe: twice as long, at most ``MAX_BACKOFF``."""
    return min(MAX_BACKOFF, backoff * 2)


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
