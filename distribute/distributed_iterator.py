"""Distributed datasets: global batches in, one per-replica batch per replica out, as sharded ``jax.Array``s.

``experimental_distribute_dataset(ds)`` builds, for this worker, ``auto_shard(rebatch(ds))``:

1. the per-replica split (docs/tf-behaviour.md#per-replica-split). With N = W workers x R local replicas and a global batch
   size B found statically (the elements' common leading dimension, else the nearest ``batch`` upstream):
   the *balanced* split (``BalancedRebatch``: sizes differ by at most one, worker w's list rotated by w*R).
   When B cannot be found, and whenever DATA sharding applies (AUTO falling back to DATA included, even on
   one worker), the *legacy* split (``LegacyRebatch``: pieces of ceil(b/N), the last ones short or empty).
   ``InputOptions(split="balanced")`` keeps the balanced split in every case.
2. ``auto_shard(..., W, w)``, the same function users can call (``jaxfeed.distribute.auto_shard``).

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
logged to the ``jaxfeed.determinism`` logger, and ``iterator.synchronous_reason`` names it. ``get_state()`` stops it and returns
``{"version": 1, "worker": <DatasetIterator state>, "buffered": [<steps read but not yet delivered>],
"step": <steps delivered>}``; the buffered steps are host numpy data and are delivered first after
``set_state``, so nothing is lost or repeated.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import queue
import sys
import threading

import numpy as np

from jaxfeed.pipeline import Dataset
from jaxfeed.pipeline import structure as st
from jaxfeed.pipeline.errors import InvalidArgumentError, OutOfRangeError
from jaxfeed.pipeline.dataset_iterator import Optional

from . import auto_sharding as _auto_shard
from . import lifetime
from .rebatch import BalancedRebatch, LegacyRebatch
from .strategy import InputContext, InputOptions, InputReplicationMode
from .values import NARROWED, PerReplica, PerReplicaSpec, device_dtype, to_device_dtype, x64_enabled

STATE_VERSION = 1
_det_logger = logging.getLogger("jaxfeed.determinism")
_SHAPE_KEEPING = frozenset({"Map", "ParallelMap", "Prefetch", "Filter", "Take", "Skip", "Repeat", "Shuffle",
                            "Cache", "WithOptions", "Shard", "IgnoreErrors", "TakeWhile", "AssertCardinality",
                            "ElasticSelect"})  # whole elements of its input (restore_elastic's remaining batches)


def static_batch_size(node) -> int:
    """tf.distribute's ``compute_batch_size``: the common static leading dimension, else the nearest batch
    upstream, else -1. Raises ValueError for unbatched scalar elements."""
    leaves = st.flatten(node.element_spec)
    if any(getattr(s, "shape", None) == () for s in leaves):
        raise ValueError("experimental_distribute_dataset: the dataset's elements have scalar components "
                         f"({node.element_spec!r}); the dataset must yield global batches: call batch() first")
    dims = {s.shape[0] for s in leaves if getattr(s, "shape", None)}
    if len(dims) == 1 and None not in dims:
        return int(dims.pop())
    cur = node
    while cur is not None:
        if cur.kind in ("Batch", "PaddedBatch"):
            return int(cur.batch_size)
        if cur.kind not in _SHAPE_KEEPING or not cur.inputs:
            return -1
        cur = cur.inputs[0]
    return -1


def _refuse_composites(element_spec) -> None:
    """Ragged and sparse batches have no per-replica array form: a clear TypeError, not numpy's."""
    from jaxfeed.pipeline.ragged import RaggedSpec, SparseSpec

    for path, leaf in st.iter_structure_paths(element_spec):
        if isinstance(leaf, (RaggedSpec, SparseSpec)):
            raise TypeError(f"component {path} is {'ragged' if isinstance(leaf, RaggedSpec) else 'sparse'} "
                            f"({leaf!r}): distribution splits dense arrays over replicas; pad it (padded_batch) "
                            "or convert it (to_list(), to_dense()) in the pipeline first.")


class DistributedDataset:
    """What ``experimental_distribute_dataset`` / ``distribute_datasets_from_function`` return."""

    def __init__(self, strategy, datasets, options, consecutive: bool, static_cap, element_spec, decision=None):
        _refuse_composites(element_spec)
        self._strategy = strategy
        self._datasets = datasets  # one per worker (consecutive) or one per local replica
        self._options = options
        self._consecutive = consecutive
        self._cap = static_cap
        self._replica_spec = element_spec  # one replica's TensorSpec nest, dtypes as the pipeline yields them
        self._warned: set = set()  # components whose 64-bit values were reported narrowed (once each)
        self.decision = decision  # the auto-shard decision (policy applied and why), None for from_function
        self._serial = 0
        self._source = None  # experimental_distribute_dataset: the user's global dataset G
        self._layout = None  # (replicas N, workers W, this worker) it was split for
        self._elastic = None  # the elastic global state G was started from (restore_elastic), else None

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_dataset(cls, strategy, dataset, options=None):
        if not isinstance(dataset, Dataset):
            raise TypeError(f"experimental_distribute_dataset: expected a Dataset, got {type(dataset).__name__}")
        _refuse_composites(dataset.element_spec)
        options = options or InputOptions()
        if options.experimental_replication_mode != InputReplicationMode.PER_WORKER:
            raise ValueError("experimental_distribute_dataset supports only InputReplicationMode.PER_WORKER; use "
                             "distribute_datasets_from_function for PER_REPLICA")
        n = strategy.num_replicas_in_sync
        w_count, w_index = strategy._input_workers()
        r = n // w_count
        root = dataset._node
        b = static_batch_size(root) if n > 1 else -1
        if n > 1:
            if b >= 0:
                root = BalancedRebatch(root, b, w_count, r, w_index)
            elif options.split == "balanced":
                raise ValueError("InputOptions(split='balanced') needs a global batch size known statically; batch "
                                 "the dataset with batch(B) (or drop_remainder=True)")
            else:
                root = LegacyRebatch(root, n)
        sharded, decision = _auto_shard.rewrite(root, dataset.options(), w_count, w_index,
                                                keep_balanced=options.split == "balanced")
        cap = -(-b // n) if b > 0 else None
        spec = cls._per_replica_spec(dataset.element_spec, b, n, n > 1)
        dds = cls(strategy, [Dataset(sharded)], options, True, cap, spec, decision)
        dds._source, dds._layout = dataset, (n, w_count, w_index)
        return dds

    @classmethod
    def from_function(cls, strategy, dataset_fn, options=None):
        options = options or InputOptions()
        if not callable(dataset_fn):
            raise TypeError(f"distribute_datasets_from_function: dataset_fn must be callable, got {dataset_fn!r}")
        n = strategy.num_replicas_in_sync
        w_count, w_index = strategy._input_workers()
        if options.experimental_replication_mode == InputReplicationMode.PER_REPLICA:
            ctxs = [InputContext(n, rid, n) for rid in strategy._local_replica_ids]
        else:
            ctxs = [InputContext(w_count, w_index, n)]
        datasets = []
        for ctx in ctxs:
            ds = dataset_fn(ctx)
            if not isinstance(ds, Dataset):
                raise TypeError(f"distribute_datasets_from_function: dataset_fn must return a Dataset, got "
                                f"{type(ds).__name__} ({ds!r:.80})")
            datasets.append(ds)
        spec = datasets[0].element_spec
        leaves = st.flatten(spec)
        per = -1
        if leaves and all(getattr(s, "shape", None) for s in leaves):
            try:
                per = static_batch_size(datasets[0]._node)
            except ValueError:
                per = -1
        consecutive = options.experimental_replication_mode == InputReplicationMode.PER_WORKER
        return cls(strategy, datasets, options, consecutive, per if per > 0 else None, spec, None)

    @staticmethod
    def _per_replica_spec(spec, b, n, split):
        if not split:
            return spec
        even = b > 0 and b % n == 0

        def one(s):
            if not getattr(s, "shape", None):
                return s
            lead = s.shape[0]
            return s.unbatched().with_leading(b // n if (even and lead is not None) else None)

        return st.map_structure(one, spec)

    def explain(self) -> str:
        """The auto-shard decision (policy and why) and the graph this worker runs."""
        from jaxfeed.pipeline import graph

        head = ("distribute_datasets_from_function: no auto-shard, no rebatch" if self.decision is None else
                f"auto-shard policy {self.decision.applied.name} (requested {self.decision.requested.name}): "
                f"{self.decision.reason}")
        return head + "\n" + "\n\n".join(graph.describe(d._node) for d in self._datasets)

    # ------------------------------------------------------------------ protocol
    @property
    def element_spec(self):
        """The element's nest with a ``PerReplicaSpec`` per component (one spec per local replica, as
        tf.distribute): the leading dimension is None unless every replica's size is static; dtypes are the
        ones that arrive (64-bit ones are 32-bit on the devices while JAX's x64 mode is off; strings and
        ``experimental_fetch_to_device=False`` stay numpy on the host)."""
        fetch = self._options.experimental_fetch_to_device
        x64 = x64_enabled()
        n = max(1, len(getattr(self._strategy, "_local_replica_ids", ()) or ()))

        def one(spec):
            if fetch and isinstance(spec, st.TensorSpec) and spec.dtype != st.STRING:
                spec = st.TensorSpec(spec.shape, device_dtype(spec.dtype, x64))
            return PerReplicaSpec(*([spec] * n))

        return st.map_structure(one, self._replica_spec)

    def _fully_static(self) -> bool:
        """tf.distribute's ``_is_statically_shaped`` of the per-replica spec: every dimension known."""
        leaves = st.flatten(self._replica_spec)
        return bool(leaves) and all(getattr(x, "shape", None) is not None and None not in x.shape for x in leaves)

    def __iter__(self):
        self._serial += 1
        return DistributedIterator(self)

    # ------------------------------------------------------------------ elastic resume
    def restore_elastic(self, states) -> "DistributedIterator":
        """An iterator continuing a job whose W workers (any W, any replica count) saved ``states``
        (``states[i]``: worker i's ``iterator.get_state()``, or its serialized bytes, all at the same step):
        together, this job's workers yield exactly the global batches not yet consumed, in order.

        Supported: datasets from ``experimental_distribute_dataset`` under DATA auto-sharding (AUTO falling
        back to DATA included) with the legacy split, over a global dataset that ``jaxfeed.pipeline.elastic``
        supports (deterministic, random-access sources); the others are refused with its errors. Each step
        of such a job consumes exactly one global batch of G (the W x R pieces of one batch), so a state
        saved at step S by every worker says: the first S global batches are consumed. The new job's workers
        read ``elastic.worker_dataset(G, 1, 0, global_state)`` (G from batch S on, skipped by index
        arithmetic over index streams), split for this strategy. A job restored this way can be resumed
        elastically again (its states carry the global state it started from)."""
        from jaxfeed.pipeline import checkpoint, elastic
        from jaxfeed.pipeline.options import AutoShardPolicy
        from jaxfeed.pipeline.errors import FailedPreconditionError

        what = "DistributedDataset.restore_elastic"
        if self._source is None:
            raise InvalidArgumentError(f"{what}: only datasets from experimental_distribute_dataset can be restored "
                                       "elastically (distribute_datasets_from_function builds its own pipelines).",
                                       what)
        if self.decision.applied != AutoShardPolicy.DATA or self._options.split == "balanced":
            raise FailedPreconditionError(
                f"{what}: elastic resume needs DATA auto-sharding with the legacy split (every step then consumes "
                f"one global batch); this dataset uses {self.decision.applied.name}"
                f"{' with split=balanced' if self._options.split == 'balanced' else ''}. Set "
                "Options().experimental_distribute.auto_shard_policy = AutoShardPolicy.DATA.", what)
        G = self._source
        elastic.check_supported(G)
        states = [checkpoint.deserialize(x) if isinstance(x, (bytes, bytearray, memoryview)) else x
                  for x in states]
        if not states:
            raise InvalidArgumentError(f"{what}: no worker states given.", what)
        for i, st_ in enumerate(states):
            if not isinstance(st_, dict) or st_.get("version") != STATE_VERSION or "layout" not in st_:
                raise InvalidArgumentError(f"{what}: state {i} is not a distributed iterator state of an "
                                           "experimental_distribute_dataset iterator.", what)
        previous = states[0].get("elastic")
        steps = sorted({int(x["step"]) for x in states})
        if len(steps) > 1 or any(x.get("elastic") != previous for x in states):
            raise FailedPreconditionError(f"{what}: the workers' states are from different steps {steps} (or "
                                          "different restores); save every worker at the same step.", what)
        iterations = {int(x["workers"][0].get("iteration", 0)) for x in states}
        if len(iterations) > 1:
            raise FailedPreconditionError(f"{what}: the workers were in different epochs of the dataset "
                                          f"(iteration keys {sorted(iterations)}).", what)
        started = G if previous is None else elastic.worker_dataset(G, 1, 0, previous)
        workers = len(states)
        for i, st_ in enumerate(states):
            n, w_count, w_index = (st_["layout"][k] for k in ("replicas", "num_workers", "worker"))
            if (w_count, w_index) != (workers, i):
                raise FailedPreconditionError(
                    f"{what}: state {i} was saved by worker {w_index} of {w_count}; pass the {w_count} workers' "
                    "states in worker order.", what)
            expected = DistributedDataset.from_dataset(_Layout(n, w_count, w_index), started, self._options)
            if st_["workers"][0].get("fingerprint") != expected._datasets[0].fingerprint():
                where = checkpoint.describe_difference(st_["workers"][0].get("nodes"), expected._datasets[0]._node)
                raise FailedPreconditionError(f"{what}: the state of worker {i} is not from this pipeline ({where}).",
                                              what)
        # G-level positions: the job consumed the first `steps[0]` batches of what it started from
        holes = list((previous or {}).get("holes", []))
        frontier = int((previous or {}).get("frontier", 0))
        consumed = steps[0]
        taken = min(consumed, len(holes))
        holes, frontier = holes[taken:], frontier + (consumed - taken)
        global_state = {"kind": elastic.GLOBAL_STATE_KIND, "version": elastic.GLOBAL_STATE_VERSION,
                        "fingerprint": G.fingerprint(), "nodes": checkpoint.graph_signature(G._node),
                        "iteration": iterations.pop(), "frontier": frontier, "holes": holes}
        rest = elastic.worker_dataset(G, 1, 0, global_state)
        new = DistributedDataset.from_dataset(self._strategy, rest, self._options)
        new._source, new._elastic = G, global_state
        new._datasets[0]._iterations = int(global_state["iteration"])  # the saved epoch's shuffle order
        return iter(new)

    def reduce(self, initial_state, reduce_fn):
        """``reduce_fn(state, step)`` over every step, in order (tf.distribute's ``DistributedDataset.reduce``);
        steps are regrouped (a nest of ``PerReplica``) and ragged ones carry their true sizes, so
        ``strategy.reduce(..., axis=0)`` inside ``reduce_fn`` counts only real examples."""
        state = initial_state
        for step in self:
            state = reduce_fn(state, step)
        return state


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


class _Layout:
    """What building one worker's distributed dataset asks of a strategy (for checking saved states)."""

    def __init__(self, replicas, num_workers, worker):
        self.num_replicas_in_sync = int(replicas)
        self._w = (int(num_workers), int(worker))

    def _input_workers(self):
        return self._w


class DistributedIterator:
    """Yields one ``PerReplica`` step at a time; see the module docstring (state, padding, prefetch)."""

    def __init__(self, dds: DistributedDataset):
        self._dds = dds
        self._strategy = dds._strategy
        self._its = [d.make_iterator() for d in dds._datasets]
        self._R = len(self._strategy._local_replica_ids)
        self._cap = dds._cap
        self._template = None
        self._buffered: collections.deque = collections.deque()  # host steps read ahead (restored or drained)
        self._queue = None
        self._thread = None
        self._stop = threading.Event()
        self._delivered = 0
        self._read = 0  # host steps assembled (key for the workers' agreement)
        self._exhausted = False
        self._closed = False
        self._generation = 0
        self._uid = self._strategy._next_iterator_uid()
        # JAX's x64 mode is thread-local: the prefetch thread places steps as the creating thread would
        self._x64 = x64_enabled()
        # tf.distribute drops a partial last step when one worker's per-replica shapes are fully static
        # (its partial-batch handling is off then): ``batch(drop_remainder=True)`` gives whole steps only
        self._drop_partial = self._strategy._input_workers()[0] == 1 and dds._fully_static()
        self._paths = None
        self.synchronous_reason = _synchronous_reason(dds._datasets)
        if self.synchronous_reason is not None:
            _det_logger.info("distributed iterator: steps are read on the consumer's thread, no prefetch thread "
                             "(determinism is enabled and %s is stateful)", self.synchronous_reason)
        if self._strategy._multi_process and self._cap is None:
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
        pieces = self._pieces()
        if self._drop_partial and (len(pieces) < self._R or any(p is None for p in pieces)):
            pieces = []  # a partial step under fully static shapes: the end (tf.distribute's rule)
        local_sizes = [0] * self._R
        for i, p in enumerate(pieces):
            if p is not None:
                local_sizes[i] = st.batched_len(p)
                if self._template is None:
                    self._template = st.map_structure(lambda a: np.asarray(a)[:0], p)
        sizes = self._strategy._agree_step(self._uid, self._generation, self._read, local_sizes)
        self._read += 1
        if sizes is None or max(sizes) == 0:
            return None
        if self._template is None:
            self._template = self._empty_template()
        cap = max(sizes)
        if self._cap is not None:
            cap = max(cap, self._cap)
        leaves_per_piece = [st.flatten(p) if p is not None else None for p in pieces]
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
        """One step as the element's nest with a ``PerReplica`` per component (tf.distribute's regroup)."""
        import jax

        s = self._strategy
        sizes = np.asarray(host["sizes"], np.int64)
        ragged = bool(np.any(sizes != host["cap"]))
        sizes = sizes if ragged else None
        fetch = self._dds._options.experimental_fetch_to_device
        if not fetch and s._multi_process:
            raise ValueError("experimental_fetch_to_device=False is supported on one worker only")
        leaf = jax.tree_util.tree_structure(0)
        out = []
        for j, arr in enumerate(host["leaves"]):
            if arr.dtype == object or not fetch:  # strings never go to a device (TF keeps them on the CPU)
                out.append(PerReplica(leaf, [arr], s, stacked=False, sizes=sizes, cap=host["cap"], host=True))
                continue
            if not self._x64 and arr.dtype in NARROWED:  # (the check and its message only for 64-bit values)
                arr = to_device_dtype(arr, self._component_where(j), self._x64, self._dds._warned)
            with jax.enable_x64(True) if self._x64 else contextlib.nullcontext():
                dev = s._per_replica_from_local([arr], stacked=False)[0]
            out.append(PerReplica(leaf, [dev], s, stacked=False, sizes=sizes, cap=host["cap"]))
        return st.pack_as(self._template, out)

    # ------------------------------------------------------------------ background prefetch
    def _producer(self):
        try:
            while not self._stop.is_set():
                host = self._host_step()
                item = ("end", None) if host is None else ("step", host)
                if item[0] == "step" and self._dds._options.experimental_fetch_to_device:
                    item = ("step", host, self._to_device(host))
                while not self._stop.is_set():
                    try:
                        self._queue.put(item, timeout=0.05)
                        break
                    except queue.Full:
                        continue
                else:
                    self._buffered.append(host) if host is not None else None
                    return
                if host is None:
                    return
        except BaseException as e:  # noqa: BLE001 - delivered to the consumer at this step
            self._queue.put(("error", e))

    def _start(self):
        n = self._dds._options.experimental_per_replica_buffer_size
        self._stop.clear()
        self._queue = queue.Queue(maxsize=max(1, n))
        self._thread = threading.Thread(target=self._producer, daemon=True, name="jaxfeed-distribute-prefetch")
        lifetime.track(self)  # halted before JAX's runtime goes at exit (a thread killed inside JAX aborts)
        self._thread.start()

    def _halt(self):
        """Stop the producer; steps it prepared go back to the host buffer, in order."""
        if self._thread is None:
            return
        self._stop.set()
        drained = []
        while self._thread.is_alive() or not self._queue.empty():
            try:
                drained.append(self._queue.get(timeout=0.05))
            except queue.Empty:
                continue
        self._thread.join()
        self._thread = None
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
            host = self._host_step()
            return ("end", None) if host is None else ("step", host, self._to_device(host))
        if self._thread is None:
            self._start()
        item = self._queue.get()
        if item[0] == "step" and len(item) == 2:
            item = ("step", item[1], self._to_device(item[1]))
        return item

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
        return item[2]

    def _halt_after_error(self):
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=1)
            self._thread = None

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
                "buffered": [None if h is None else {"leaves": list(h["leaves"]), "sizes": list(h["sizes"]),
                                                      "cap": int(h["cap"])}
                             for h in self._buffered if not isinstance(h, tuple)],
                "template": None if self._template is None else st.flatten(self._template),
                "step": self._delivered, "exhausted": self._exhausted,
                **({} if self._dds._layout is None else {
                    "layout": dict(zip(("replicas", "num_workers", "worker"), self._dds._layout)),
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
        self._buffered = collections.deque(state["buffered"])
        if state.get("template") is not None:
            spec_like = self._dds._replica_spec
            self._template = st.pack_as(spec_like, [np.asarray(x) for x in state["template"]])
        self._delivered = int(state["step"])
        self._exhausted = bool(state.get("exhausted", False))
        self._generation += 1

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
