"""Parallel maps whose executor AUTOTUNE chooses: threads or worker processes (``engine/executor_choice.py``).

``ChosenMapIterator`` runs a ``map`` and ``ChosenMapBatchIterator`` a fused ``map(f).batch(b)``
(``MapAndBatch``). Each owns the map's input iterator and an *inner* iterator that does the work and reads
that same input: at first a thread one (``ParallelMapIterator``, ``MapBatchIterator``), held back from
reading. At the first ``next`` (or ``start_ahead``) the probe maps the first input elements, the decision is
made, and the inner iterator continues after them -- a thread one as it is, else a process one built in its
place (``ProcessMapIterator``; for the fused stage a ``BatchIterator`` over it) -- delivering the probe's
results first. So nothing is dropped or repeated, and the output is the same whichever executor runs.

The fused stage probes a whole number of batches (the inner stage then cuts aligned batches from its carry
and goes on building whole batches).

State, of one layout before and after the decision whichever executor runs: a map's (``input``,
``position``, ``ready``, ``input_done``, ``seeds``: thread and process maps save the same), or the fused
stage's (``input``, ``position``, ``carry``, ``done``, ``seeds``, and ``pending``: batches a batch over a
process map finished), with ``executor``: None (not decided yet), "thread" or "process", and its
``reason``. A restored iterator runs on the executor it was saved from (no new probe); a state saved before
the decision probes when restored.
"""

from __future__ import annotations

import dataclasses

import time

from ..engine import executor_choice
from ..engine.blocks import Failure, apply_block
from ..engine.executor_choice import Decision
from .base import Iterator, count_held
from .map import node_seeds, rng_factory


class _HandOver:
    """The iterator context, except that building ``node`` gives ``iterator`` (built already, shared): how an
    inner stage reads the chooser's input instead of building its own."""

    def __init__(self, ctx, node, iterator):
        self._ctx, self._node, self._iterator = ctx, node, iterator

    def build(self, node):
        return self._iterator if node is self._node else self._ctx.build(node)

    def __getattr__(self, name):  # options, iteration, cpu_count, _shared, on_close, ...
        return getattr(self._ctx, name)


class _Chooser(Iterator):
    # Tests replace these (a fake clock, a fake probe) so that the decision never depends on the machine.
    clock = staticmethod(time.perf_counter)
    cpu_clock = staticmethod(time.thread_time)
    process_clock = staticmethod(time.process_time)  # all threads' CPU: the pipeline's others' in the warm-up
    probe = staticmethod(executor_choice.probe)
    byte_seconds = staticmethod(executor_choice.fresh_byte_seconds)  # a byte's cost written into fresh memory

    def __init__(self, node, ctx, map_node):
        super().__init__(node, ctx)
        self._map = map_node
        self.input = ctx.build(map_node.inputs[0])
        self._seeds = node_seeds(map_node)
        self.executor_decision: Decision | None = None  # None until decided
        self._remembered = executor_choice.remembered(ctx, node)  # an earlier iterator's decision: no probe
        self._executor = self._remembered.executor if self._remembered is not None else "thread"
        self._inner, self._stage = self._build(self._executor)  # what the inner iterator runs on

    # ------------------------------------------------------------------ subclass hooks
    def _build(self, executor):
        """(inner iterator, the stage in it that reads ``self.input``), held back from reading."""
        raise NotImplementedError

    def _probe_size(self, position, n) -> int:
        """How many elements the two-thread probe maps after ``position``, about ``n`` wanted."""
        return n

    def _aligned(self, position) -> int:
        """How many more input elements the probe maps so that ``position`` ends on a block boundary."""
        return 0

    # ------------------------------------------------------------------ the decision
    def _decide(self):
        if self.executor_decision is not None:
            return
        decision = self._remembered
        position, results = 0, []
        if decision is None:
            results, position, decision, ended = self._run_probe()
            if not ended:
                more = self._aligned(position)
                if more:
                    block, error = _take(self.input, more)
                    results += self._run(block, position)
                    position += len(block)
                    if error is not None:
                        results.append(Failure(error))
            if decision.executor == "process":
                why = executor_choice.picklable_reason(self._map.map_func)
                decision = decision if why is None else Decision("thread", why)
            executor_choice.remember(self.ctx, self.node, decision)
        self._switch(decision.executor)
        self.executor_decision = decision
        self._stage.resume_after(position, results, self._seeds)
        if decision.executor == "process":  # this thread maps on while they start: no wait for them
            self._stage.start_in_background()

    def _run(self, block, position):
        if not block:
            return []
        extra = rng_factory(self._seeds, self.ctx.iteration)
        unpack = type(block[0]) is tuple
        return apply_block(self._map.map_func, block, unpack, self._map.label(), position, extra)[0]

    def _run_probe(self):
        """(results, position after them, decision, whether the input ended or failed): a warm-up on this
        thread, in doubling chunks, estimates the CPU time per call; then the two-thread probe measures
        (again, up to ``MAX_PROBES`` times, while other programs disturb it)."""
        results, position, step = [], 0, 1
        total = 0.0  # wall seconds of the warm-up's calls (not of reading the input)
        # The best chunk's CPU per call and CPU / wall: being descheduled adds wall time, never CPU time.
        per_call, solo = float("inf"), 0.0
        judged = 0  # chunks measured (two at least, unless a call is slow: a busy machine deschedules us)
        # the pipeline's other threads' CPU meanwhile: the process's, less this thread's (reading included)
        began = self.clock(), self.process_clock(), self.cpu_clock()
        while True:
            block, error = _take(self.input, step)
            t0, c0 = self.clock(), self.cpu_clock()
            mapped = self._run(block, position)
            results += mapped
            wall, cpu = self.clock() - t0, self.cpu_clock() - c0
            total += wall
            position += len(block)
            if error is not None:
                return results + [Failure(error)], position, Decision(
                    "thread", "the input failed before the probe measured"), True
            if len(block) < step:
                return results, position, Decision("thread", "the input ended within the probe"), True
            slow = wall >= executor_choice.SLOW_CALL * len(block)
            if step > 1 or slow:  # (a first call may pay one-off costs: imports, caches)
                # (a CPU clock too coarse to see the chunk -- Windows' ticks -- leaves its wall time)
                per_call = min(per_call, (cpu if cpu > 0 else wall) / len(block))
                solo = max(solo, cpu / wall if wall > 0 else 0.0)
                judged += 1
            warm = total >= executor_choice.WARM_SECONDS and (judged >= 2 or slow)
            if warm or position >= executor_choice.MAX_WARM:
                break
            step *= 2
        wall = self.clock() - began[0]
        others = (self.process_clock() - began[1]) - (self.cpu_clock() - began[2])
        own = max(0.0, others / wall) if wall > 0 else 0.0
        if executor_choice.upstream_threads(self._map):
            own = max(own, executor_choice.UPSTREAM_CORES)
        cpus = self.ctx.cpu_count
        # (the trip is timed only when it can matter: P3's parse cannot pay even for a free one)
        quick = executor_choice.too_cheap(per_call) or executor_choice.cannot_pay(per_call, 0.0, cpus, own)
        if quick is not None:
            return results, position, quick, False
        moved, byte_seconds = executor_choice.moved_bytes(block, mapped), self.byte_seconds()
        slab = executor_choice.slab_bytes(block, mapped)
        quick = executor_choice.cannot_pay(per_call, executor_choice.transfer_seconds(block, mapped), cpus, own,
                                           moved, byte_seconds, slab)
        if quick is not None:
            return results, position, quick, False
        for _ in range(executor_choice.MAX_PROBES):
            n = int(executor_choice.PROBE_SECONDS / max(per_call, 1e-9))
            n = self._probe_size(position, max(2, min(executor_choice.MAX_PROBE, n)))
            block, error = _take(self.input, n)
            measured = None
            if len(block) >= 2:
                mapped, measured = self.probe(self._run_block, block, position, solo, self.clock, self.cpu_clock)
                measured = dataclasses.replace(measured, solo_per_call=per_call, warm_own=own,
                                               moved_bytes=moved, byte_seconds=byte_seconds, slab_bytes=slab)
            else:
                mapped = self._run(block, position)
            results += mapped
            position += len(block)
            if error is not None:
                results.append(Failure(error))
            if measured is None or (error is None and len(block) < n):
                return results, position, Decision("thread", "the input ended within the probe"), True
            card = self._map.inputs[0].cardinality()
            remaining = max(0, card - position) if card >= 0 else None
            decision = executor_choice.decide(measured, self.ctx.cpu_count, remaining)
            if error is not None or decision.final:
                break
        return results, position, decision, error is not None

    def _run_block(self, block, position):
        return self._run(block, position), False

    def _switch(self, executor):
        """Make the inner iterator one that runs on ``executor`` (a fresh one if it runs on the other)."""
        if executor != self._executor:
            self._stage.input = None  # the input is ours, not the discarded stage's to close
            self._inner.close()
            self._inner, self._stage = self._build(executor)
            self._executor = executor

    # ------------------------------------------------------------------ protocol
    def _next(self):
        self._decide()
        return self._inner.next()

    def _next_many(self, n):
        self._decide()
        return self._inner.next_many(n)

    def start_ahead(self):
        self._decide()
        self._inner.start_ahead()

    def children(self):
        return [self._inner]

    @property
    def parallelism(self) -> int:
        return self._stage.parallelism

    @property
    def workers(self) -> int:
        return self._stage.workers

    @property
    def work_seconds(self):
        return self._stage.work_seconds

    def buffer_fill(self) -> float:
        return self._inner.buffer_fill() if hasattr(self._inner, "buffer_fill") else 0.0

    def get_state(self):
        decision = self.executor_decision
        return {"executor": None if decision is None else decision.executor,
                "reason": None if decision is None else decision.reason, **self._inner_state()}

    def _inner_state(self) -> dict:
        return self._inner.get_state()

    def set_state(self, state):
        executor = state["executor"]
        if executor not in (None, "thread", "process"):
            raise ValueError(f"executor {executor!r} is neither 'thread' nor 'process'")
        self._switch(executor or "thread")
        self._restore_inner(state)
        if executor is None:  # saved before the decision: nothing was read yet, the probe runs when asked
            self.executor_decision = None
            self._stage.waiting_for_probe = True
        else:
            self.executor_decision = Decision(executor, str(state["reason"]))
            self._stage.waiting_for_probe = False

    def _restore_inner(self, state) -> None:
        self._inner.set_state(state)  # (it reads its own keys)

    def close(self):
        self._inner.close()
        self.input.close()  # (closing is idempotent; the inner stage closes it too)


class ChosenMapIterator(_Chooser):
    """A ``map`` whose executor AUTOTUNE chooses."""

    stacks_rows = True  # a process inner's workers may deliver stacked rows (a batch above asks next_rows)

    def __init__(self, node, ctx):
        super().__init__(node, ctx, node)

    def _build(self, executor):
        given = _HandOver(self.ctx, self._map.inputs[0], self.input)
        if executor == "process":
            from .process_map import ProcessMapIterator

            inner = ProcessMapIterator(self._map, given)
        else:
            from .parallel_map import ParallelMapIterator

            inner = ParallelMapIterator(self._map, given)
        inner.waiting_for_probe = True
        return inner, inner

    @staticmethod
    def held(state, weight=None):
        """Results made and not yet delivered, one per input element (``Iterator.held``)."""
        return count_held(state["ready"], weight)

    def next_rows(self, n):
        self._decide()
        if self._inner.stacks_rows:
            return self._inner.next_rows(n)
        return None, -1  # elements, for next_many (which returns [] at the end)

    @property
    def deterministic(self) -> bool:
        return self._inner.deterministic


class ChosenMapBatchIterator(_Chooser):
    """A fused ``map(f).batch(b)`` whose executor AUTOTUNE chooses: on threads it stays fused; in processes
    it runs as a process map with a batch over it (the workers stack each block: no fusion needed)."""

    def __init__(self, node, ctx):
        super().__init__(node, ctx, node.map_node)

    def _build(self, executor):
        if executor == "process":
            from .batch import BatchIterator
            from .process_map import ProcessMapIterator

            stage = ProcessMapIterator(self._map, _HandOver(self.ctx, self._map.inputs[0], self.input))
            batch_node = self.node.batch_node
            stage.rows_per_batch = batch_node.batch_size
            inner = BatchIterator(batch_node, _HandOver(self.ctx, batch_node.inputs[0], stage))
        else:
            from .map_batch import MapBatchIterator

            stage = inner = MapBatchIterator(self.node, _HandOver(self.ctx, self.node.inputs[0], self.input))
        stage.waiting_for_probe = True
        return inner, stage

    # One state layout whichever executor runs (the fused stage's): a process map's "ready" is the carry,
    # its "input_done" is "done", and the batch over it adds the batches it finished ("pending") and the error
    # it kept for its next call ("deferred", as the fused stage's).
    def _inner_state(self):
        state = self._inner.get_state()
        if self._executor == "thread":
            return {**state, "pending": []}
        m = state["input"]
        return {"input": m["input"], "position": m["position"], "carry": m["ready"], "done": m["input_done"],
                "seeds": m["seeds"], "pending": state["pending"], "deferred": state["deferred"]}

    def _restore_inner(self, state):
        if self._executor == "thread":
            self._inner.set_state(state)
            return
        m = {"input": state["input"], "position": state["position"], "ready": state["carry"],
             "input_done": state["done"], "seeds": state["seeds"]}
        ended = bool(state["done"]) and not state["carry"] and not state["pending"]
        self._inner.set_state({"input": m, "done": ended, "pending": state["pending"],
                               "deferred": state.get("deferred")})

    @staticmethod
    def held(state, weight=None):
        """Mapped rows not yet in a delivered batch, one per input element (``Iterator.held``)."""
        from .batch import BatchIterator

        return count_held(state["carry"], weight) + BatchIterator.held(state, weight)

    def _probe_size(self, position, n):
        # the probe ends where a batch does, the nearest boundary to what it wants (the first batch comes
        # from the probe's results: it should not wait for a second one)
        size = self.node.batch_node.batch_size
        end = max(size, size * round((position + n) / size))
        while end - position < 2:
            end += size
        return end - position

    def _aligned(self, position):
        size = self.node.batch_node.batch_size
        return -position % size

    def children(self):
        # Before the decision the inner stage is not exposed: a warm start (start_ahead on every stage,
        # inputs first) must not start it before the probe has read the first elements.
        return [self._inner] if self.executor_decision is not None else [self.input]


def _take(it, n):
    """(up to ``n`` elements of ``it``, fewer only at its end; the error it raised after them, or None)."""
    out = []
    try:
        while len(out) < n:
            more = it.next_many(n - len(out))
            if not more:
                break
            out.extend(more)
    except Exception as e:  # noqa: BLE001 - delivered in its place, after the elements before it
        return out, e
    return out, None


# ------------------------------------------------------------------------------------------ builders
def for_map(node, ctx):
    """The iterator of a parallel ``map`` whose executor AUTOTUNE chooses (a chooser, or a thread map that
    records why it stays on threads), or None for a map that does not choose."""
    if not executor_choice.chooses(node, ctx.options):
        return None
    why = executor_choice.static_reason(node, ctx)
    if why is None:
        return ChosenMapIterator(node, ctx)
    from .parallel_map import ParallelMapIterator

    it = ParallelMapIterator(node, ctx)
    it.executor_decision = Decision("thread", why)
    return it


def for_map_batch(node, ctx):
    """``for_map`` for a fused ``map(f).batch(b)``."""
    m = node.map_node
    if m.num_parallel_calls is None or not executor_choice.chooses(m, ctx.options):
        return None
    why = executor_choice.static_reason(m, ctx, node, node.vectorized)
    if why is None:
        return ChosenMapBatchIterator(node, ctx)
    from .map_batch import MapBatchIterator

    it = MapBatchIterator(node, ctx)
    it.executor_decision = Decision("thread", why)
    return it
