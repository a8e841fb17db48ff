"""The distributed iterator: one step at a time, a nest of ``PerReplica`` values, with explicit state.

Each step takes R consecutive pieces (one per local replica, in replica order). When the data runs out in
the middle of a step, the remaining replicas get empty batches; a step is produced if any replica of any
worker got data (workers agree on that through the coordination service) -- except, as tf.distribute, on
one worker when the per-replica element spec is fully static (e.g. ``batch(..., drop_remainder=True)``
into ``distribute_datasets_from_function``): then the partial last step is dropped. A step whose pieces are
not all the same size is *ragged*: every piece is zero-padded to the step's capacity (ceil(B/N) for a
static global batch size B, so the compiled step is reused; else the largest piece), and each
``PerReplica`` carries the true sizes (``.sizes``); ``run`` exposes them as
``get_replica_context().num_examples`` / ``example_mask``, ``reduce(..., axis=0)``, ``gather`` and
``experimental_local_results`` use them.

A step is regrouped as tf.distribute does: the element's nest (``pipeline.structure``, the one nest module)
with one ``PerReplica`` per component, so ``x, y = next(it)`` works and dict components keep their keys.
Numeric components go to the devices through ``values.to_device_dtype`` (64-bit values need JAX's x64 mode,
as it was on the thread that created the iterator, or must fit 32 bits); string components stay on the
host as host ``PerReplica`` values (as TF keeps them on the CPU).

A background thread prepares up to ``experimental_per_replica_buffer_size`` steps ahead and places them on
the devices -- except under determinism (``jaxfeed.determinism.enable_op_determinism``) when the pipeline
has a stateful function: then every step is read on the consumer's thread when it is asked for (tf.data's
rule: stateful functions run in a fixed sequence, prefetch is switched off), the node that forced it is
logged to the ``jaxfeed.determinism`` logger, and ``iterator.synchronous_reason`` names it. While that thread
runs, the iterator also holds the last two steps it delivered and the thread drops older ones: a step the user
has let go is freed there, not inside the next ``next`` (freeing its per-device buffers is not free). That
thread reads a single pipeline's output ``prefetch`` itself (``prefetch_takeover.py``: one hand-off per step,
not two), reading ahead into that prefetch's buffer while its queue of steps (``step_queue.py``) is full. A
dense step (every replica a full piece) is joined without the
padding walk, and a step's numeric components go to the devices in one placement call.

That thread only pays when the consumer works between its calls (a training step waited for, or a logging
loop): its steps are made while the consumer is away. A consumer that does next to nothing between calls (a
loop that drains the iterator, an evaluation loop whose device work runs asynchronously) gains nothing from it
and pays every hand-off -- 100-150 us of CPU per step on 2 cores, as much as the whole placement. So the
iterator serves *on demand* while the consumer's time away stays under a tenth of the time a step takes to
make, and starts its thread again once it passes three tenths (``pipeline/engine/overlap.py``, measured on
the consumer's calls and the thread's steps; ``iterator.feed_decision`` says which). Steps the thread had
prepared are delivered first; values, order and state are the same either way.

``get_state()`` stops it and returns ``{"version": 1, "workers": [<DatasetIterator state>, ...], "buffered":
[<steps read but not yet delivered, an error among them as a Failure>], "step": <steps delivered>, ...}`` (an
``experimental_distribute_dataset`` iterator adds its ``layout`` and the elastic global state it started from);
the buffered steps are host numpy data and are delivered first after ``set_state``, so nothing is lost or
repeated. ``"unagreed"`` holds the pieces of a step the thread had read but not yet agreed on with the other
workers when it was stopped (a peer, saving at the same step, may never make that step: the stop ends the
wait); the step is made from them again, after the buffered ones.

The strategy is known only through the dataset's ``InputFeed`` (``feed.py``): replicas, workers, the step
agreement and the placement of values.
"""

from __future__ import annotations

import collections
import logging
import sys
import threading

import numpy as np

from jaxfeed.pipeline import structure as st
from jaxfeed.pipeline.dataset_iterator import Optional
from jaxfeed.pipeline.engine import autotune, interrupts, overlap
from jaxfeed.pipeline.engine.blocks import Failure
from jaxfeed.pipeline.errors import InvalidArgumentError, OutOfRangeError

from . import lifetime, prefetch_takeover
from .step_queue import StepQueue
from .values import NARROWED, to_device_dtype, x64_enabled

STATE_VERSION = 1
# delivered steps the iterator still holds while its prefetch thread runs: the user's step in use and the
# one before (dropped by the user when the next step is bound); older ones are freed by that thread
RETIRE_AFTER = 2
_det_logger = logging.getLogger("jaxfeed.determinism")


def _synchronous_reason(datasets):
    """Why the steps must be read on the consumer's thread (determinism on and a stateful function in a
    pipeline: which node), else None. Looks at ``jaxfeed.determinism`` only if it is already imported (it
    cannot be enabled otherwise), so distribute never imports it."""
    det = sys.modules.get("jaxfeed.determinism")
    if det is None or not det.is_op_determinism_enabled():
        return None
    from jaxfeed.determinism.rewriter import stateful_reason

    for ds in datasets:
        reason = stateful_reason(ds._node)
        if reason is not None:
            return reason
    return None


def _saved_step(host):
    """A step read ahead, as the state keeps it: host data, None (the end), or the error the step raised (a
    ``Failure``, delivered again at its place after a restore -- an error read ahead is never dropped)."""
    if host is None:
        return None
    if isinstance(host, tuple):  # ("error", exception)
        return Failure(host[1])
    return {"leaves": list(host["leaves"]), "sizes": list(host["sizes"]), "cap": int(host["cap"])}


class DistributedIterator:
    """Yields one ``PerReplica`` step at a time; see the module docstring (state, padding, prefetch)."""

    def __init__(self, dds):
        self._dds = dds
        self._feed = feed = dds._feed
        self._its = [d.make_iterator() for d in dds._datasets]
        interrupts.install()  # (a Ctrl-C in a step is raised when it returns: see the module)
        self._R = len(feed.local_replicas)
        self._cap = dds._cap
        self._template = None
        self._buffered: collections.deque = collections.deque()  # host steps read ahead (restored or drained)
        # steps delivered while the prefetch thread runs, held until it drops them (see ``_free_retired``)
        self._retired: collections.deque = collections.deque()
        self._queue = None
        self._thread = None
        self._stop = threading.Event()
        # on demand while the consumer does next to nothing between calls (see the module docstring); under
        # ``Options().autotune.enabled = False`` (on a pipeline) the thread always runs, as tf.distribute's
        self._judge = overlap.OverlapJudge() if all(autotune.enabled(d.options()) for d in dds._datasets) else None
        self._t_out = None  # when the last step went to the consumer
        self._output = None  # a single pipeline's output prefetch
        self._make_seconds, self._made = 0.0, 0  # the thread's time making steps, and the steps
        if len(self._its) > 1:  # this iterator takes turns among the pipelines: each one's output prefetch
            for it in self._its:  # would see the others' time as its consumer's work; they keep their threads
                it.root_iterator.judge_consumer(False)
        else:  # the pipeline's output prefetch (under the stages distribution adds) judges whoever reads it
            self._output = prefetch_takeover.output_prefetch(self._its[0].root_iterator)  # (with its own thread)
            if self._output is not None:
                self._output.judge_consumer(True)
        self._delivered = 0
        self._read = 0  # host steps assembled (key for the workers' agreement)
        self._unagreed = None  # (pieces, reported): a step whose agreement a halt cut short (``_host_step``)
        self._exhausted = False
        self._closed = False
        self._generation = 0
        self._uid = feed.new_iterator_id()
        # JAX's x64 mode is thread-local: the prefetch thread places steps as the creating thread would
        self._x64 = x64_enabled()
        # tf.distribute drops a partial last step when one worker's per-replica shapes are fully static
        # (its partial-batch handling is off then): ``batch(drop_remainder=True)`` gives whole steps only
        self._drop_partial = feed.num_workers == 1 and dds._fully_static()
        self._paths = None
        # the pipeline's output prefetch this iterator reads itself (prefetch_takeover.py), on its thread or,
        # serving on demand, on the consumer's: taken over when the thread last started or stopped
        self._taken = None
        self.synchronous_reason = _synchronous_reason(dds._datasets)
        if self.synchronous_reason is not None:
            _det_logger.info("distributed iterator: steps are read on the consumer's thread, no prefetch thread "
                             "(determinism is enabled and %s is stateful)", self.synchronous_reason)
        if feed.multi_process and self._cap is None:
            raise ValueError("multi-worker distributed datasets need a per-replica capacity known statically: batch "
                             "the dataset with batch(global_batch_size) before distributing it")

    # ------------------------------------------------------------------ host side: one step
    def _pieces(self):
        pieces = []
        if self._dds._consecutive:
            it = self._its[0]
            while len(pieces) < self._R:
                got = it.next_many(self._R - len(pieces))
                if not got:
                    break
                pieces.extend(got)
        else:
            for it in self._its:
                try:
                    pieces.append(it.next())
                except StopIteration:
                    pieces.append(None)
            if all(p is None for p in pieces):
                pieces = []
        return pieces

    def _host_step(self):
        """The next step as host data: {"leaves": [...], "sizes": [N ints], "cap": c}; None at the end."""
        pieces, reported = (self._pieces(), False) if self._unagreed is None else self._unagreed
        if self._drop_partial and (len(pieces) < self._R or any(p is None for p in pieces)):
            pieces = []  # a partial step under fully static shapes: the end (tf.distribute's rule)
        leaves_per_piece = [None if p is None else st.flatten(p) for p in pieces]  # one flatten per piece
        local_sizes = [0] * self._R
        for i, leaves in enumerate(leaves_per_piece):
            if leaves is not None:
                local_sizes[i] = len(leaves[0]) if leaves else 0  # st.batched_len, on the leaves at hand
                if self._template is None:
                    self._template = st.map_structure(lambda a: np.asarray(a)[:0], pieces[i])
        # only the producer thread's wait ends at a halt (a step made on the consumer's thread waits it out)
        stop = self._stop if threading.current_thread() is self._thread else None
        try:
            sizes = self._feed.agree_step(self._uid, self._generation, self._read, local_sizes, stop=stop,
                                          reported=reported)
        except lifetime.StepAbandoned:
            # halted while a peer had not reported this step yet: its pieces (read from the pipelines) wait
            # for the step to be made again -- here when the iterator goes on, in the state when it is saved
            self._unagreed = (pieces, True)
            raise
        self._unagreed = None
        self._read += 1
        if sizes is None or max(sizes) == 0:
            return None
        if self._template is None:
            self._template = self._empty_template()
        cap = max(sizes)
        if self._cap is not None:
            cap = max(cap, self._cap)
        if len(pieces) == self._R and all(n == cap for n in local_sizes):
            # a dense step (every replica a full piece, the usual case): one concatenation per component,
            # without the padding walk (a read-only view of the global batch instead of the copy measured no
            # faster: checking where 8 pieces lie costs about what copying 512 KiB of warm memory does)
            out = [np.concatenate([leaves[j] for leaves in leaves_per_piece], axis=0) if self._R > 1
                   else np.array(leaves_per_piece[0][j], copy=True) for j in range(len(leaves_per_piece[0]))]
            return {"leaves": out, "sizes": list(sizes), "cap": cap}
        tmpl = st.flatten(self._template)
        out = []
        for j, t in enumerate(tmpl):
            t = np.asarray(t)
            parts = []
            for i in range(self._R):
                piece = leaves_per_piece[i][j] if i < len(leaves_per_piece) and leaves_per_piece[i] is not None \
                    else t
                piece = np.asarray(piece)
                if piece.shape[0] < cap:
                    pad = np.zeros((cap - piece.shape[0],) + piece.shape[1:], piece.dtype)
                    if piece.dtype == object:  # strings (host values): padded with b"", never read
                        pad[...] = b""
                    piece = np.concatenate([piece, pad], axis=0)
                parts.append(piece)
            out.append(np.concatenate(parts, axis=0) if len(parts) > 1 else np.array(parts[0], copy=True))
        return {"leaves": out, "sizes": list(sizes), "cap": cap}

    def _empty_template(self):
        spec = self._dds._replica_spec

        def one(s):
            shape = s.shape
            if shape is None or any(d is None for d in shape[1:]):
                raise ValueError("a worker with no data cannot build an empty batch for a component of unknown "
                                 f"shape {s!r}")
            return np.zeros((0,) + tuple(shape[1:]), s.dtype)

        return st.map_structure(one, spec)

    def _component_where(self, j) -> str:
        if self._paths is None:  # paths in flatten order, matched through the leaves (no walk of our own)
            marked = st.pack_as(self._template, list(range(len(st.flatten(self._template)))))
            by_leaf = {leaf: path for path, leaf in st.iter_structure_paths(marked)}
            self._paths = [by_leaf[i] for i in range(len(by_leaf))]
        what = "distributed dataset" if self._dds._source is not None else "distribute_datasets_from_function"
        return f"{what}: component {self._paths[j]}"

    def _to_device(self, host):
        """One step as the element's nest with a ``PerReplica`` per component (tf.distribute's regroup). The
        components that go to the devices are placed by one call (one transfer dispatch per step, not one
        per component)."""
        feed = self._feed
        cap = host["cap"]
        ragged = any(n != cap for n in host["sizes"])
        sizes = np.asarray(host["sizes"], np.int64) if ragged else None
        fetch = self._dds._options.experimental_fetch_to_device
        if not fetch and feed.multi_process:
            raise ValueError("experimental_fetch_to_device=False is supported on one worker only")
        out = [None] * len(host["leaves"])
        to_place, where = [], []
        for j, arr in enumerate(host["leaves"]):
            if arr.dtype == object or not fetch:  # strings never go to a device (TF keeps them on the CPU)
                out[j] = feed.on_host(arr, sizes, cap)
                continue
            if not self._x64 and arr.dtype in NARROWED:  # (the check and its message only for 64-bit values)
                arr = to_device_dtype(arr, self._component_where(j), self._x64, self._dds._warned)
            to_place.append(arr)
            where.append(j)
        if to_place:
            if self._x64:  # JAX's x64 mode is thread-local: as on the thread that created the iterator
                import jax

                with jax.enable_x64(True):
                    placed = feed.on_devices_many(to_place, sizes, cap)
            else:
                placed = feed.on_devices_many(to_place, sizes, cap)
            for j, value in zip(where, placed):
                out[j] = value
        return st.pack_as(self._template, out)

    # ------------------------------------------------------------------ background prefetch
    def _free_retired(self):
        """Drop the iterator's reference to steps delivered ``RETIRE_AFTER`` steps ago or more. When the user
        dropped theirs already (``batch = next(it)`` rebinds the name), this thread frees the step's device
        buffers, off the training loop's path (freeing a step's per-device buffers costs tens of
        microseconds, charged to ``next`` when the rebinding frees them)."""
        retired = self._retired
        while len(retired) > RETIRE_AFTER:
            try:
                retired.popleft()
            except IndexError:  # cleared by the consumer meanwhile (close after a join that timed out)
                break

    def _producer(self):
        clock = overlap.clock
        # while the queue of steps is full, read ahead into the pipeline's prefetch (its buffer, its capacity)
        read_ahead = None if self._taken is None else self._taken.read_ahead
        try:
            while not self._stop.is_set():
                self._free_retired()
                t0 = clock()
                host = self._host_step()
                item = ("end", None) if host is None else ("step", host)
                if item[0] == "step" and self._dds._options.experimental_fetch_to_device:
                    item = ("step", host, self._to_device(host))
                self._make_seconds += clock() - t0
                self._made += 1
                if not self._queue.put(item, self._stop, while_full=read_ahead):
                    if host is not None:  # stopped while the queue was full: the host step is kept
                        self._buffered.append(host)
                    return
                if host is None:
                    return
        except lifetime.StepAbandoned:
            return  # halting: the step's pieces wait in ``_unagreed``
        except BaseException as e:  # noqa: BLE001 - delivered to the consumer at this step
            if not self._queue.put(("error", e), self._stop):
                self._buffered.append(("error", e))

    def _start(self):
        n = self._dds._options.experimental_per_replica_buffer_size
        # this thread reads the pipeline: its own output prefetch would be a second hand-off per step; while
        # the steps' buffer is full, this thread reads ahead into that prefetch's buffer instead
        self._taken = prefetch_takeover.take_over(self._its)
        if self._output is not None:
            self._output.new_reader()
        self._stop.clear()
        self._queue = StepQueue(n)
        self._thread = threading.Thread(target=self._producer, daemon=True, name="jaxfeed-distribute-prefetch")
        lifetime.track(self)  # halted before JAX's runtime goes at exit (a thread killed inside JAX aborts)
        self._thread.start()

    def _halt(self):
        """Stop the producer; steps it prepared go back to the host buffer, in order."""
        if self._thread is None:
            return
        self._stop.set()
        drained = []
        while self._thread.is_alive():  # (a producer waiting for room looks at the stop event now and then)
            drained.extend(self._queue.drain())
            self._thread.join(0.05)
        drained.extend(self._queue.drain())
        self._thread.join()
        self._thread = None
        self._retired.clear()  # no thread to free them: the user's references decide again
        tail = list(self._buffered)  # what the producer parked after being stopped (newest)
        self._buffered.clear()
        for item in drained:
            if item[0] == "step":
                self._buffered.append(item[1])
            elif item[0] == "end":
                self._buffered.append(None)
            else:
                self._buffered.append(item)  # an error, re-raised when its step comes
        self._buffered.extend(tail)

    def _next_item(self):
        if self._buffered:
            host = self._buffered.popleft()
            if host is None:
                return ("end", None)
            if isinstance(host, tuple):
                return host
            return ("step", host, self._to_device(host))
        if (self._dds._options.experimental_per_replica_buffer_size == 0 or self.synchronous_reason is not None
                or lifetime.exiting()):
            return self._step_here()
        judge = self._judge
        t_in = overlap.clock()
        if judge is None:  # (autotune off: the thread always)
            if self._thread is None:
                self._start()
            return self._from_queue()
        if judge.on_demand:
            # a step from what the thread had read ahead into the pipeline's prefetch costs next to nothing
            # here: it tells nothing about making steps
            made_here = self._taken is None or not self._taken.holds_elements()
            item = self._step_here()
            t_out = overlap.clock()
            if made_here and self._t_out is not None and judge.observe(t_in - self._t_out, t_out - t_in):
                t_out = None  # the consumer works between calls now: the next call starts the thread
                self._make_seconds, self._made = 0.0, 0
            self._t_out = t_out
            return item
        if self._thread is None:
            self._start()
        elif self._t_out is not None and self._made and \
                judge.observe(t_in - self._t_out, self._make_seconds / self._made):
            # the consumer does next to nothing between calls: the thread's hand-off only costs
            self._halt()  # (the steps it had prepared are delivered first, in order)
            if self._output is not None:  # the consumer's thread reads the pipeline's output prefetch too (its
                self._output.new_reader()  # own thread, if it got it back, parks: it would overlap nothing)
                self._taken = prefetch_takeover.take_over(self._its, park=True)
            self._t_out = None
            return self._next_item()
        item = self._from_queue()
        self._t_out = overlap.clock()
        return item

    def _from_queue(self):
        item = self._queue.get()
        if item[0] == "step" and len(item) == 2:
            item = ("step", item[1], self._to_device(item[1]))
        return item

    def _step_here(self):
        """The next step made on the consumer's thread."""
        host = self._host_step()
        return ("end", None) if host is None else ("step", host, self._to_device(host))

    @property
    def took_over_prefetch(self) -> bool:
        """Whether this iterator reads the pipeline's output prefetch itself (``prefetch_takeover.py``; that
        prefetch may since have got its own thread back, while this iterator's thread read ahead)."""
        return self._taken is not None

    @property
    def feed_decision(self) -> str:
        """Where the steps are made: "thread" or "on demand", and why (``pipeline/engine/overlap.py``)."""
        if self.synchronous_reason is not None:
            return f"on demand (determinism: {self.synchronous_reason} is stateful)"
        if self._dds._options.experimental_per_replica_buffer_size == 0:
            return "on demand (experimental_per_replica_buffer_size=0)"
        if self._judge is None:
            return "thread (autotune is off)"
        return self._judge.describe("step")

    # ------------------------------------------------------------------ protocol
    def __iter__(self):
        return self

    def __next__(self):
        if self._closed:
            raise InvalidArgumentError("The distributed iterator is closed.", "DistributedIterator")
        if self._exhausted:
            raise StopIteration
        item = self._next_item()
        if item[0] == "end":
            self._exhausted = True
            self._halt()
            raise StopIteration
        if item[0] == "error":
            self._halt_after_error()
            raise item[1]
        self._delivered += 1
        if self._thread is not None:  # the prefetch thread frees it later (deque appends are thread-safe)
            self._retired.append(item[2])
        return item[2]

    def _halt_after_error(self):
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=1)
            self._thread = None
        self._retired.clear()

    next = __next__

    def get_next(self):
        try:
            return self.__next__()
        except StopIteration:
            raise OutOfRangeError("End of sequence", "get_next") from None

    def get_next_as_optional(self):
        try:
            return Optional(self.__next__(), True)
        except StopIteration:
            return Optional()

    @property
    def element_spec(self):
        return self._dds.element_spec

    # ------------------------------------------------------------------ state
    def get_state(self) -> dict:
        self._halt()
        return {"version": STATE_VERSION, "workers": [it.get_state() for it in self._its],
                "buffered": [_saved_step(h) for h in self._buffered],
                # a step read from the pipelines whose agreement the halt cut short: made again after a restore
                "unagreed": None if self._unagreed is None else list(self._unagreed[0]),
                "template": None if self._template is None else st.flatten(self._template),
                "step": self._delivered, "exhausted": self._exhausted,
                **({} if self._dds.layout is None else {
                    "layout": dict(zip(("replicas", "num_workers", "worker"), self._dds.layout)),
                    "elastic": self._dds._elastic})}

    def set_state(self, state: dict) -> None:
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise InvalidArgumentError(f"not a distributed iterator state (version {state.get('version')!r} "
                                       f"expected {STATE_VERSION})" if isinstance(state, dict) else
                                       f"not a distributed iterator state: {type(state).__name__}", "set_state")
        if len(state["workers"]) != len(self._its):
            raise InvalidArgumentError(f"the state holds {len(state['workers'])} input pipeline(s), this iterator "
                                       f"has {len(self._its)}", "set_state")
        self._halt()
        for it, s in zip(self._its, state["workers"]):
            it.set_state(s)
        self._buffered = collections.deque(("error", h.error) if type(h) is Failure else h for h in state["buffered"])
        if state.get("template") is not None:
            spec_like = self._dds._replica_spec
            self._template = st.pack_as(spec_like, [np.asarray(x) for x in state["template"]])
        self._delivered = int(state["step"])
        self._exhausted = bool(state.get("exhausted", False))
        unagreed = state.get("unagreed")
        self._unagreed = None if unagreed is None else (list(unagreed), False)  # (a new generation: report it)
        self._generation += 1
        self._t_out = None  # (no observation of the consumer spans a restore; the judge keeps its mode)

    # ------------------------------------------------------------------ lifetime
    def close(self):
        if self._closed:
            return
        self._closed = True
        try:
            self._halt_after_error()
        finally:
            for it in self._its:
                it.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass


# Ctrl-C during a step (a step's bookkeeping, its wait for the pipelines): raised when the step returns
interrupts.step(DistributedIterator.__next__, DistributedIterator.get_state, DistributedIterator.set_state)
