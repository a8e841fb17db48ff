"""Parallel ``map`` on threads: blocks of elements go to worker threads, results come back in order.

Elements cross threads in blocks sized so that one task takes about half a millisecond (a thread
hand-off costs tens of microseconds here), with at most ``2 x parallelism`` blocks in flight. With
``deterministic=False`` blocks are delivered as they complete; otherwise in input order (the consumer
stalls only on the oldest block, and at most ``2 x parallelism`` blocks are ever buffered).

``num_parallel_calls=AUTOTUNE``: the pool (``pool.TunedPool``) has one thread per CPU in the budget but runs
at most the tuned parallelism at once; that value (also blocks in flight / 2) starts at 1 and is tuned by
``autotune.Tuner`` (a step up is kept only if it raises the delivery rate).

When the consumer needs a block that no worker has started yet, it takes the block back from the pool and
runs it itself instead of waiting: where the function holds the GIL the consumer's own thread does the
work rather than idling. (The first call is not run inline, unlike the fused map+batch's first batch: a
slow function's first elements would then run one after another.)
"""

from __future__ import annotations

import collections
import time
from concurrent import futures

from ..options import effective_deterministic
from ..engine import autotune
from .base import count_held, finalizing
from ..engine.blocks import Delivery, DeliveringIterator, Failure, apply_block, drop_args
from .map import HandedOverByProbe, node_seeds, rng_factory
from ..engine.pool import TunedPool, stage_threads

TARGET_TASK_SECONDS = 0.0005
MAX_BLOCK = 256


class _Done:
    """A finished 'future' for results produced on the consumer thread (an input error)."""

    def __init__(self, value):
        self._value = value

    def result(self):
        return self._value

    def done(self):
        return True


def _run_block(fn, block, unpack, label, position, extra):
    t0 = time.perf_counter()
    results, failed = apply_block(fn, block, unpack, label, position, extra)
    return results, failed, (time.perf_counter() - t0) / max(1, len(block))


class ParallelMapIterator(HandedOverByProbe, DeliveringIterator):
    # The tuner's clock, also timing the consumer's waits it is told about: tests put a fake one here, so
    # that what the tuner decides never depends on the machine's speed or load.
    clock = staticmethod(time.perf_counter)

    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        self._label = node.label()
        self.deterministic = effective_deterministic(ctx.options, node.deterministic)
        self.workers = self._initial_workers(node, ctx)
        self._tuner = None
        if (node.num_parallel_calls or 0) < 0 and autotune.enabled(ctx.options):
            self._tuner = autotune.tuner_for(node, ctx, 1, self.workers, clock=self.clock)
        self.work_seconds = 0.0  # function time measured on the workers (statistics)
        self._pool = None
        self._inflight: collections.deque = collections.deque()
        self._ready = Delivery()
        self._position = 0
        self._input_done = False
        self._block = 1  # adapted from measured per-element time
        self._seeds = node_seeds(node)
        self._extra = rng_factory(self._seeds, ctx.iteration)

    @staticmethod
    def _initial_workers(node, ctx) -> int:
        npc = node.num_parallel_calls
        if npc is None or npc < 0:  # AUTOTUNE: one worker per CPU in the budget (and the thread cap)
            return stage_threads(ctx, ctx.cpu_count)
        return npc

    # ------------------------------------------------------------------ producing
    def _fill(self):
        if self._pool is None:
            # Options.threading.private_threadpool_size caps the threads, not the blocks in flight
            threads = stage_threads(self.ctx, self.workers, unbounded=self.node.use_unbounded_threadpool)
            self._pool = TunedPool(threads, self.parallelism, "jaxfeed-map")
        limit = 2 * (self._tuner.value if self._tuner is not None else self.workers)
        while not self._input_done and len(self._inflight) < limit:
            try:
                block = self.input.next_many(self._block)
            except Exception as e:  # noqa: BLE001 - an upstream error is delivered in its place
                self._inflight.append(_Done(([Failure(e)], True, 0.0)))
                continue
            if not block:
                self._input_done = True
                break
            unpack = type(block[0]) is tuple
            args = (self.node.map_func, block, unpack, self._label, self._position, self._extra)
            fut = self._pool.submit(_run_block, *args)
            fut.args = args  # to run it on the consumer if no worker has started it when it is due
            fut.add_done_callback(drop_args)
            self._position += len(block)
            self._inflight.append(fut)

    def resume_after(self, position: int, ready: list, seeds) -> None:
        super().resume_after(position, ready, seeds)
        self._extra = rng_factory(seeds, self.ctx.iteration)

    def _next_done(self):
        if self.deterministic:
            return self._inflight.popleft()
        done = next((f for f in self._inflight if f.done()), None)
        if done is None:  # nothing finished: a block no worker has started is run by the consumer
            done = next((f for f in self._inflight if not f.running()), None)
        if done is None:
            finished, _ = futures.wait(list(self._inflight), return_when=futures.FIRST_COMPLETED)
            done = next(f for f in self._inflight if f in finished)
        self._inflight.remove(done)
        return done

    def _finish(self, done):
        """``done``, a block the consumer needs and no worker has finished, finished: run here if no worker
        has started it, else waited for. The consumer is blocked on this stage for the whole call (tests
        gate the workers on it, so that the tuner's signals never depend on the scheduler)."""
        args = done.args
        if done.cancel():  # due, and no worker has started it: run it here
            done = _Done(_run_block(*args))
            if not self.deterministic:  # as completed: blocks workers finished meanwhile go first
                self._inflight.append(done)
                done = self._next_done()
        else:
            done.result()
        return done

    def _refill(self) -> bool:
        self._fill()
        if not self._inflight:
            return False
        done = self._next_done()
        if not done.done():
            # The consumer's time here -- waiting, or running an unstarted block itself -- is time it
            # spent blocked on this stage: the tuner's signal that more parallelism may pay.
            t0 = self.clock()
            done = self._finish(done)
            if self._tuner is not None:
                self._tuner.waited(self.clock() - t0)
        results, failed, per_element = done.result()
        if self._tuner is not None:
            self._tuner.tick(len(results))
            self._pool.limit = self._tuner.value
        self.work_seconds += per_element * len(results)
        if per_element > 0:
            self._block = max(1, min(MAX_BLOCK, int(TARGET_TASK_SECONDS / per_element)))
        self._ready = Delivery(results, failed)
        self._fill()
        return True

    # ------------------------------------------------------------------ protocol
    def buffer_fill(self) -> float:
        return len(self._inflight) / (2 * (self._tuner.value if self._tuner is not None else self.workers))

    @property
    def parallelism(self) -> int:
        return self._tuner.value if self._tuner is not None else self.workers

    def children(self):
        return [self.input]

    def get_state(self):
        # In-flight work is finished, not dropped: its results become part of the saved state.
        pending = self._ready.remaining()
        for fut in list(self._inflight):
            pending.extend(fut.result()[0])
        self._inflight.clear()
        self._ready = Delivery(pending, any(type(r) is Failure for r in pending))
        return {"input": self.input.get_state(), "position": self._position, "ready": pending,
                "input_done": self._input_done, "seeds": self._seeds}

    @staticmethod
    def held(state, weight=None):
        """Results made and not yet delivered, one per input element (``Iterator.held``)."""
        return count_held(state["ready"], weight)

    def set_state(self, state):
        self._discard_inflight()
        self.input.set_state(state["input"])
        self._position = int(state["position"])
        self._input_done = bool(state["input_done"])
        self._ready = Delivery(state["ready"], any(type(r) is Failure for r in state["ready"]))
        self._seeds = None if state["seeds"] is None else tuple(state["seeds"])
        self._extra = rng_factory(self._seeds, self.ctx.iteration)

    def _discard_inflight(self):
        for fut in self._inflight:
            fut.cancel() if hasattr(fut, "cancel") else None
        self._inflight.clear()

    def close(self):
        if self._tuner is not None:
            self._tuner.close()
        if not finalizing():  # cancelling takes each future's lock, which a stopped thread may hold
            self._discard_inflight()
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        super().close()
