"""Distributed datasets: what ``experimental_distribute_dataset`` / ``distribute_datasets_from_function`` return.

``experimental_distribute_dataset(ds)`` gives this worker the graph ``AutoShard(rebatch(ds))``:

1. the per-replica split (tf.distribute's rules). With N = W workers x R local replicas and a global batch
   size B found statically (``input_specs.static_batch_size``: the elements' common leading dimension, else
   the nearest batch upstream): the *balanced* split (``BalancedRebatch``: sizes differ by at most one, worker
   w's list rotated by w*R). When B cannot be found, and whenever DATA sharding applies (AUTO falling back to
   DATA included, even on one worker), the *legacy* split (``LegacyRebatch``: pieces of ceil(b/N), the last
   ones short or empty). ``InputOptions(split="balanced")`` keeps the balanced split in every case.
2. ``AutoShard(..., W, w)``: worker w's share under the dataset's auto-shard policy, applied by the
   ``auto_shard`` pass when the graph runs (``auto_shard_pass.py``; the same rewrite as
   ``jaxfeed.distribute.auto_shard``, which users can call). The policy is decided, checked (too few files
   for FILE raises here) and warned about when the dataset is distributed.

Steps, padding, prefetch and state: ``distributed_iterator.py``. The strategy is known only through the
``InputFeed`` it hands over (``feed.py``).
"""

from __future__ import annotations

from jaxfeed.pipeline import Dataset
from jaxfeed.pipeline import structure as st

from . import auto_sharding
from .auto_shard_pass import AutoShard
from .feed import InputFeed
from .input_specs import fully_static, per_replica_spec, refuse_composites, static_batch_size
from .rebatch import BalancedRebatch, LegacyRebatch
from .strategy import InputContext, InputOptions, InputReplicationMode
from .values import PerReplicaSpec, device_dtype, x64_enabled


class DistributedDataset:
    """Per-replica batches of one dataset (or one per local replica), for the strategy behind ``feed``."""

    def __init__(self, feed: InputFeed, datasets, options, consecutive: bool, static_cap, element_spec,
                 decision=None):
        refuse_composites(element_spec)
        self._feed = feed
        self._datasets = datasets  # one per worker (consecutive) or one per local replica
        self._options = options
        self._consecutive = consecutive
        self._cap = static_cap
        self._replica_spec = element_spec  # one replica's TensorSpec nest, dtypes as the pipeline yields them
        self._warned: set = set()  # components whose 64-bit values were reported narrowed (once each)
        self.decision = decision  # the auto-shard decision (policy applied and why), None for from_function
        self._serial = 0
        self._source = None  # experimental_distribute_dataset: the user's global dataset G
        self._elastic = None  # the elastic global state G was started from (restore_elastic), else None

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_dataset(cls, feed: InputFeed, dataset, options=None):
        if not isinstance(dataset, Dataset):
            raise TypeError(f"experimental_distribute_dataset: expected a Dataset, got {type(dataset).__name__}")
        refuse_composites(dataset.element_spec)
        options = options or InputOptions()
        if options.experimental_replication_mode != InputReplicationMode.PER_WORKER:
            raise ValueError("experimental_distribute_dataset supports only InputReplicationMode.PER_WORKER; use "
                             "distribute_datasets_from_function for PER_REPLICA")
        n, w_count, w_index = feed.num_replicas, feed.num_workers, feed.worker_index
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
        keep_balanced = options.split == "balanced"
        # decided (and refused, and warned about) now; applied by the auto_shard pass when the graph runs
        share, decision = auto_sharding.rewrite(root, dataset.options(), w_count, w_index,
                                                keep_balanced=keep_balanced)
        worker_graph = AutoShard(root, w_count, w_index, keep_balanced, expansion=share)
        cap = -(-b // n) if b > 0 else None
        spec = per_replica_spec(dataset.element_spec, b, n, n > 1)
        dds = cls(feed, [Dataset(worker_graph)], options, True, cap, spec, decision)
        dds._source = dataset
        return dds

    @classmethod
    def from_function(cls, feed: InputFeed, dataset_fn, options=None):
        options = options or InputOptions()
        if not callable(dataset_fn):
            raise TypeError(f"distribute_datasets_from_function: dataset_fn must be callable, got {dataset_fn!r}")
        n = feed.num_replicas
        if options.experimental_replication_mode == InputReplicationMode.PER_REPLICA:
            ctxs = [InputContext(n, rid, n) for rid in feed.local_replicas]
        else:
            ctxs = [InputContext(feed.num_workers, feed.worker_index, n)]
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
        return cls(feed, datasets, options, consecutive, per if per > 0 else None, spec, None)

    @property
    def layout(self) -> tuple[int, int, int] | None:
        """(replicas N, workers W, this worker) an ``experimental_distribute_dataset`` was split for."""
        if self._source is None:
            return None
        return self._feed.num_replicas, self._feed.num_workers, self._feed.worker_index

    def explain(self) -> str:
        """The auto-shard decision (policy and why), then the graph this worker runs and what each pass
        changed (auto-shard's notes among them)."""
        head = ("distribute_datasets_from_function: no auto-shard, no rebatch" if self.decision is None else
                f"auto-shard policy {self.decision.applied.name} (requested {self.decision.requested.name}): "
                f"{self.decision.reason}")
        return head + "\n" + "\n\n".join(d.explain() for d in self._datasets)

    # ------------------------------------------------------------------ protocol
    @property
    def element_spec(self):
        """The element's nest with a ``PerReplicaSpec`` per component (one spec per local replica, as
        tf.distribute): the leading dimension is None unless every replica's size is static; dtypes are the
        ones that arrive (64-bit ones are 32-bit on the devices while JAX's x64 mode is off; strings and
        ``experimental_fetch_to_device=False`` stay numpy on the host)."""
        fetch = self._options.experimental_fetch_to_device
        x64 = x64_enabled()
        n = max(1, len(self._feed.local_replicas))

        def one(spec):
            if fetch and isinstance(spec, st.TensorSpec) and spec.dtype != st.STRING:
                spec = st.TensorSpec(spec.shape, device_dtype(spec.dtype, x64))
            return PerReplicaSpec(*([spec] * n))

        return st.map_structure(one, self._replica_spec)

    def _fully_static(self) -> bool:
        return fully_static(self._replica_spec)

    def __iter__(self):
        from .distributed_iterator import DistributedIterator

        self._serial += 1
        return DistributedIterator(self)

    def restore_elastic(self, states):
        """An iterator continuing a job whose W workers (any W, any replica count) saved ``states``
        (``states[i]``: worker i's ``iterator.get_state()``, or its serialized bytes, all at the same step):
        together, this job's workers yield exactly the global batches not yet consumed, in order. See
        ``elastic_restore.py``."""
        from .elastic_restore import restore_elastic

        return restore_elastic(self, states)

    def reduce(self, initial_state, reduce_fn):
        """``reduce_fn(state, step)`` over every step, in order (tf.distribute's ``DistributedDataset.reduce``);
        steps are regrouped (a nest of ``PerReplica``) and ragged ones carry their true sizes, so
        ``strategy.reduce(..., axis=0)`` inside ``reduce_fn`` counts only real examples."""
        state = initial_state
        for step in self:
            state = reduce_fn(state, step)
        return state
