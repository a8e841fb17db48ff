"""The fused ``map(f).batch(b)`` stage (created by the map_batch_fusion and vectorized_map passes).

Per batch it pulls ``b`` input elements, maps them in one block loop (or, for a ``vectorized`` map, calls
``f`` once on the stacked inputs) and writes the results straight into the batch's arrays. A parallel
map's batches are built on a thread pool, up to ``2 x parallelism`` batches ahead, in order.

Exactly what the plain graph yields, errors included: in ``map(f).batch(b)`` an error of ``f`` at an
element fails that batch, the elements collected before it are dropped, and the next batch starts with the
element after it. So a block whose results hold a failure goes through a *carry*: its mapped results are
consumed element by element like the plain batch would, and later batches are cut from the carry. A
vectorized call that raises is re-run element by element to find the failing element.
"""

from __future__ import annotations

import collections
import time
import warnings

import numpy as np

from .. import structure
from ..options import effective_deterministic
from ..engine import autotune
from .base import Iterator, count_held, finalizing
from .batch import stack_fast, stack_leaf_fast, stack_plain_tuples
from ..engine import blocks
from ..engine.blocks import Failure, drop_args, normalize_results, restored_error, run_block, saved_error
from .map import node_seeds, rng_factory
from ..engine.pool import TunedPool, stage_threads

# A per-element map's first batch is finished on the consumer when the rest would take less than this at the
# rate of the elements mapped so far (see _run_first); else the rest is split over the workers.
FIRST_INLINE_SECONDS = 0.01
# The first call alone is judged only when it is this slow: it may pay one-off costs (imports, caches) that a
# cheap function's later calls do not (the rate is judged on the next chunk then; see _run_first).
FIRST_CALL_SLOW = 0.001


def _map_block(fn, elements, stacked, unpack, label, position, extra, vectorized, what, proven=False):
    """(batch or None, mapped results or None, seconds): a stacked batch when no element failed. A ``proven``
    vectorized map runs element by element where numpy would raise for an element and not for a batch."""
    t0 = time.perf_counter()
    if vectorized and not (proven and _numpy_raises()):
        try:
            if stacked is None:
                stacked = structure.stack(elements, what=what)
            batch_fn = getattr(fn, "on_batch", fn)  # a declared output_signature checks a batch as one
            args = stacked if (unpack and type(stacked) is tuple) else (stacked,)
            out = blocks.taken(batch_fn(*args), stacked)  # a batch it reuses: see blocks.taken
            return structure.normalize(out, f"result of {label}"), None, time.perf_counter() - t0
        except Exception:  # noqa: BLE001 - find the failing element the way the plain graph would
            pass
    results, failed = run_block(fn, elements, unpack, label, position, extra)
    return _as_batch(results, failed, label, what, position) + (time.perf_counter() - t0,)


def _numpy_raises() -> bool:
    """Whether numpy errors raise, or RuntimeWarnings are errors, on this thread: numpy checks integer
    overflow for scalars only, so there an element's ``x + 1`` could raise where the batch's wraps."""
    if any(v in ("raise", "call") for v in np.geterr().values()):
        return True
    return any(f[0] == "error" and issubclass(RuntimeWarning, f[2]) for f in warnings.filters)


def take_until_error(it, n):
    """(up to ``n`` elements of ``it``, None), fewer only at the end; or (the elements before an error, the
    error) when ``it`` raised after them."""
    out = []
    try:
        out = it.next_many(n)
        while out and len(out) < n:
            more = it.next_many(n - len(out))
            if not more:
                break
            out.extend(more)
    except Exception as e:  # noqa: BLE001 - raised by the consumer in its place
        return out, e
    return out, None


def indices_until_error(it, n):
    """``take_until_error`` for an index stream: (up to ``n`` indices, None) or (those before an error, it)."""
    parts, got = [], 0
    try:
        while got < n:
            idx = it.next_indices(n - got)
            if len(idx) == 0:
                break
            parts.append(idx)
            got += len(idx)
    except Exception as e:  # noqa: BLE001 - raised by the consumer in its place
        return _joined(parts), e
    return _joined(parts), None


def _joined(parts):
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else np.empty(0, np.int64)


def _as_batch(results, failed, label, what, position):
    """(batch, None), or (None, mapped results) when an element failed -- raised, or returned something
    that is not an element (None, a set...): then the results go through the carry, which raises it."""
    if failed:
        return None, normalize_results(results, label, position)[0]
    # Results that are already elements -- of one leaf type (numpy scalars of one type, arrays of one shape),
    # or flat tuples of such columns (a parse's (array, count)) -- go straight into the batch: one check of
    # their types per column instead of normalising element by element, then stacking.
    batch = stack_leaf_fast(results, results[0])
    if batch is None and type(results[0]) is tuple:
        batch = stack_plain_tuples(results)
    if batch is None:
        elements, bad = normalize_results(results, label, position)
        if bad:
            return None, elements
        try:
            batch = stack_fast(elements, what)
        except Exception:  # noqa: BLE001 - rows that do not stack (shapes differ) fail as the carry's batch:
            return None, elements  # raised where the plain batch raises it, and saved as rows by get_state
    return batch, None


class MapBatchIterator(Iterator):
    # The tuner's clock, also timing the consumer's waits it is told about and the first batch's chunks
    # (_run_first): tests put a fake one here, so that what is decided never depends on the machine's speed
    # or load.
    clock = staticmethod(time.perf_counter)

    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        m = node.map_node
        self._fn = m.map_func
        self._label = m.label()
        self._what = f"batch ({node.batch_node.label()})"
        self._size = node.batch_node.batch_size
        self._drop = node.batch_node.drop_remainder
        self._vectorized, self._proven = node.vectorized, node.proven
        self._position = 0
        self._carry: list = []  # mapped results not yet batched (after an error shifted the boundaries)
        self._done = False
        self._seeds = node_seeds(m)
        self._extra = rng_factory(self._seeds, ctx.iteration)
        npc = m.num_parallel_calls
        self._parallel = npc is not None
        self.workers = (npc if npc and npc > 0 else stage_threads(ctx, ctx.cpu_count)) if self._parallel else 1
        self._tuner = None
        if (npc or 0) < 0 and autotune.enabled(ctx.options):
            # down to 0: batches made on the consumer's thread (``_made_here``)
            self._tuner = autotune.tuner_for(node, ctx, 1, self.workers, clock=self.clock, minimum=0)
        self._pool = None
        self._inflight: collections.deque = collections.deque()
        self.work_seconds = 0.0 if self._parallel else None  # worker time, for statistics
        # The pass fuses only maps whose order is fixed: batches here always come out in input order.
        assert not self._parallel or effective_deterministic(ctx.options, m.deterministic)

    # ------------------------------------------------------------------ producing blocks
    def _pull(self, n):
        """(elements, the same stacked or None, position of the first, input error or None): up to ``n``
        input elements, fewer only at the end or when the input raised after them (the error is returned, to
        be raised in its place: after the batches before it, as the plain graph does).

        Over an index stream the batch is gathered once; a plain array batch is iterated directly (its rows
        are the elements) and a vectorized map gets it as is, with no per-element work at all."""
        position = self._position
        source = self.input.index_source
        error = None
        if source is not None:
            idx, error = indices_until_error(self.input, n)
            if len(idx) == 0:
                return [], None, position, error
            stacked = source.gather(idx)
            elements = stacked if type(stacked) is np.ndarray else structure.unstack_rows(stacked, len(idx))
        else:
            (elements, error), stacked = take_until_error(self.input, n), None
        self._position += len(elements)
        return elements, stacked, position, error

    def _run(self, elements, stacked, position, error=None):
        if len(elements):
            unpack = type(elements[0]) is tuple
            batch, results, seconds = _map_block(self._fn, elements, stacked, unpack, self._label, position,
                                                 self._extra, self._vectorized, self._what, self._proven)
        else:
            batch, results, seconds = None, [], 0.0
        if error is None:
            return batch, results, seconds
        # The input raised after these elements: in the plain graph the map has mapped them and the batch
        # they began fails with the error. As rows with a failure after them, the carry does just that.
        rows = list(results) if batch is None else structure.unstack_rows(batch, structure.batched_len(batch))
        return None, rows + [Failure(error)], seconds

    def _run_first(self, elements, stacked, position):
        """The first batch, built on the consumer thread with no hand-off (time to first batch).

        A vectorized map is one call, run here. A per-element map runs here in doubling chunks while the rest
        would take less than ``FIRST_INLINE_SECONDS`` -- the whole batch, for a cheap function; what is left
        (a slow function) is split over the pool's workers, the consumer taking back any part no worker has
        started, so a slow function's first batch keeps its parallelism.

        The rate is the quickest chunk's (being descheduled only ever adds time: on a busy machine one
        preempted chunk sent a cheap function's batch to threads that had to start first), the first call not
        counted unless slow by itself (``FIRST_CALL_SLOW``: one-off costs). Timed on ``clock``."""
        if self._vectorized:
            return self._run(elements, stacked, position)
        clock = self.clock
        t0 = clock()
        fn, label, extra = self._fn, self._label, self._extra
        unpack = type(elements[0]) is tuple
        results, failed, k, step, n = [], False, 0, 1, len(elements)
        per_element = None  # seconds per element of the quickest chunk judged
        while k < n and (per_element is None or per_element * (n - k) < FIRST_INLINE_SECONDS):
            chunk = elements[k:k + step]
            c0 = clock()
            part, bad = run_block(fn, chunk, unpack, label, position + k, extra)
            seconds = clock() - c0
            if k or seconds >= FIRST_CALL_SLOW:
                rate = seconds / len(chunk)
                per_element = rate if per_element is None else min(per_element, rate)
            results += part
            failed |= bad
            k += len(chunk)
            step *= 2
        if k < n:
            size = -(-(n - k) // self.workers)
            parts = [(fn, elements[s:s + size], unpack, label, position + s, extra) for s in range(k, n, size)]
            futs = [self._pool.submit(run_block, *args) for args in parts]
            for fut, args in zip(futs, parts):
                part, bad = run_block(*args) if fut.cancel() else fut.result()
                results += part
                failed |= bad
        return _as_batch(results, failed, label, self._what, position) + (clock() - t0,)

    def _next_block(self):
        """The next mapped block of up to ``b`` elements: (batch, None) or (None, results); None at the end."""
        if not self._parallel:
            elements, stacked, position, error = self._pull(self._size)
            if not len(elements) and error is None:
                return None
            batch, results, seconds = self._run(elements, stacked, position, error)
            return batch, results
        if self._pool is None:
            self._pool = self._new_pool()
            if not self._inflight and not self._done:  # the first batch: see _run_first
                elements, stacked, position, error = self._pull(self._size)
                if not len(elements) and error is None:
                    self._done = True
                    return None
                if error is None:
                    batch, results, seconds = self._run_first(elements, stacked, position)
                else:
                    batch, results, seconds = self._run(elements, stacked, position, error)
                self.work_seconds += seconds
                return batch, results
        if self._tuner is not None and self._tuner.value == 0 and not self._inflight:
            return self._made_here()
        self._submit_ahead()
        if not self._inflight:
            return None
        fut = self._inflight.popleft()
        if fut.done():
            batch, results, seconds = fut.result()
        else:
            # The consumer's time here -- waiting, or building a batch no worker has started itself -- is
            # time it spent blocked on this stage: the tuner's signal that more parallelism may pay.
            t0 = self.clock()
            args = fut.args
            batch, results, seconds = self._run(*args) if fut.cancel() else fut.result()
            if self._tuner is not None:
                self._tuner.waited(self.clock() - t0)
        if self._tuner is not None:
            self._tuner.tick(self._size)
            self._pool.limit = max(1, self._tuner.value)  # (0: no new tasks; those in flight finish)
        self.work_seconds += seconds
        return batch, results

    def _made_here(self):
        """AUTOTUNE stepped down to no thread: the next block is made on the consumer's thread, as a map
        without ``num_parallel_calls`` makes it. A function that holds the GIL gains nothing from a worker thread
        and pays its hand-offs: P3's parse (~3.5 us a record) cost 4.8 us a record made here, 6.8 on one worker
        thread (CPU time, the same process alternating). The time it takes counts as the consumer's wait, so the
        tuner probes a thread again in time (and keeps it only if the rate rises)."""
        if self._done:
            return None
        t0 = self.clock()
        elements, stacked, position, error = self._pull(self._size)
        if not len(elements) and error is None:
            self._done = True
            return None
        batch, results, seconds = self._run(elements, stacked, position, error)
        self._tuner.waited(self.clock() - t0)
        self._tuner.tick(self._size)
        self.work_seconds += seconds
        return batch, results

    def _new_pool(self) -> TunedPool:
        # Options.threading.private_threadpool_size caps the threads, not the batches in flight
        threads = stage_threads(self.ctx, self.workers, unbounded=self.node.map_node.use_unbounded_threadpool)
        return TunedPool(threads, self._tuner.value if self._tuner else self.workers, "jaxfeed-mapbatch")

    def _submit_ahead(self):
        """Submit batches until ``2 x parallelism`` are in flight or the input ends."""
        limit = 2 * (self._tuner.value if self._tuner is not None else self.workers)
        while not self._done and len(self._inflight) < limit:
            elements, stacked, position, error = self._pull(self._size)
            if not len(elements) and error is None:
                self._done = True
                break
            fut = self._pool.submit(self._run, elements, stacked, position, error)
            fut.args = (elements, stacked, position, error)  # to build it here if no worker started it when due
            fut.add_done_callback(drop_args)
            self._inflight.append(fut)

    def start_ahead(self):
        """Submit the first batches now (the first is then built by a worker, not on the consumer)."""
        if self._parallel and self._pool is None:
            self._pool = self._new_pool()
            self._submit_ahead()

    # ------------------------------------------------------------------ protocol
    def _next(self):
        if not self._carry:
            block = self._next_block()
            if block is None:
                raise StopIteration
            batch, results = block
            if batch is not None:
                if self._drop and structure.batched_len(batch) < self._size:
                    raise StopIteration
                return batch
            self._carry = results
        return self._from_carry()

    def _from_carry(self):
        """One batch cut from the carry (refilled as needed), or the error of the first failed element."""
        while True:
            for j, r in enumerate(self._carry[:self._size]):
                if type(r) is Failure:
                    self._carry = self._carry[j + 1:]
                    raise r.error
            if len(self._carry) >= self._size:
                batch_rows, self._carry = self._carry[:self._size], self._carry[self._size:]
                return stack_fast(batch_rows, self._what)
            block = self._next_block()
            if block is None:
                rows, self._carry = self._carry, []
                if not rows or (self._drop and len(rows) < self._size):
                    raise StopIteration
                return stack_fast(rows, self._what)
            batch, results = block
            if batch is not None:
                results = structure.unstack_rows(batch, structure.batched_len(batch))
            self._carry = self._carry + list(results)

    def buffer_fill(self) -> float:
        if not self._parallel:
            return 0.0
        return len(self._inflight) / (2 * max(1, self._tuner.value if self._tuner is not None else self.workers))

    # ------------------------------------------------------------------ state and lifetime
    def children(self):
        return [self.input]

    def get_state(self):
        # Batches in flight are finished and kept, as mapped rows, in the carry: nothing lost or repeated.
        carry = list(self._carry)
        for fut in self._inflight:
            batch, results, _ = fut.result()
            carry.extend(results if batch is None else structure.unstack_rows(batch, structure.batched_len(batch)))
        self._inflight.clear()
        self._carry = carry
        return {"input": self.input.get_state(), "position": self._position, "carry": carry,
                "done": self._done, "seeds": self._seeds, "deferred": saved_error(self._deferred)}

    @staticmethod
    def held(state, weight=None):
        """The mapped rows not yet in a delivered batch, one per input element (``Iterator.held``)."""
        return count_held(state["carry"], weight)

    def set_state(self, state):
        self._discard()
        self.input.set_state(state["input"])
        self._position = int(state["position"])
        self._carry = list(state["carry"])
        self._done = bool(state["done"])
        self._seeds = None if state["seeds"] is None else tuple(state["seeds"])
        self._extra = rng_factory(self._seeds, self.ctx.iteration)
        self._deferred = restored_error(state.get("deferred"), "'deferred'")  # (absent from older states)

    def resume_after(self, position: int, rows: list, seeds) -> None:
        """Go on after ``position`` input elements mapped elsewhere -- the executor choice's probe
        (``iterators/chosen_map.py``) -- batching their results, ``rows``, first (as the carry)."""
        self._position = position
        self._carry = list(rows)
        self._seeds = seeds
        self._extra = rng_factory(seeds, self.ctx.iteration)

    def _discard(self):
        for fut in self._inflight:
            fut.cancel()
        self._inflight.clear()

    def close(self):
        if self._tuner is not None:
            self._tuner.close()
        if not finalizing():  # cancelling takes each future's lock, which a stopped thread may hold
            self._discard()
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        super().close()
