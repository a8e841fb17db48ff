"""The strategy base class, the default strategy, replica contexts, and the small context objects.

``Strategy`` holds what every strategy shares (scope, argument checks, the input helpers); the JAX engine
(mesh, compiled ``run``, ``reduce``) is ``mirrored.MeshStrategy``. The *default strategy* (what applies
outside any scope) has one replica and runs functions directly.
"""

from __future__ import annotations

import contextlib
import warnings

import numpy as np

from . import context
from .ordered import ordered_sum
from .values import DistributedValues, PerReplica, ReduceOp, to_device_dtype, x64_enabled

_WARNED: set = set()  # narrowing reported by strategies without a set of their own (the default strategy)


class InputContext:
    """What ``distribute_datasets_from_function`` tells each input pipeline (tf.distribute.InputContext)."""

    def __init__(self, num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=1):
        self._n, self._id, self._r = int(num_input_pipelines), int(input_pipeline_id), int(num_replicas_in_sync)

    @property
    def num_input_pipelines(self):
        return self._n

    @property
    def input_pipeline_id(self):
        return self._id

    @property
    def num_replicas_in_sync(self):
        return self._r

    def get_per_replica_batch_size(self, global_batch_size):
        if global_batch_size % self._r != 0:
            raise ValueError(f"The `global_batch_size` {global_batch_size!r} is not divisible by "
                             f"`num_replicas_in_sync` {self._r!r}")
        return global_batch_size // self._r

    def __repr__(self):
        return (f"InputContext(num_input_pipelines={self._n}, input_pipeline_id={self._id}, "
                f"num_replicas_in_sync={self._r})")


class ValueContext:
    """What ``experimental_distribute_values_from_function`` passes to the value function."""

    def __init__(self, replica_id_in_sync_group=0, num_replicas_in_sync=1):
        self.replica_id_in_sync_group = int(replica_id_in_sync_group)
        self.num_replicas_in_sync = int(num_replicas_in_sync)

    def __repr__(self):
        return (f"ValueContext(replica_id_in_sync_group={self.replica_id_in_sync_group}, "
                f"num_replicas_in_sync={self.num_replicas_in_sync})")


class InputReplicationMode:
    PER_WORKER = "PER_WORKER"
    PER_REPLICA = "PER_REPLICA"


class InputOptions:
    """Options of distributed datasets (tf.distribute.InputOptions, plus jaxfeed's ``split``).

    - ``experimental_fetch_to_device`` (default True): batches arrive as ``jax.Array``s on the replicas'
      devices; False keeps numpy batches (host ``PerReplica`` values; one worker only). String components
      are host values either way (no device holds them).
    - ``experimental_per_replica_buffer_size`` (default 2): steps prepared ahead on the devices by a
      background thread (0: no thread, each step is prepared when asked for).
    - ``experimental_replication_mode`` (PER_WORKER): for ``distribute_datasets_from_function``.
    - ``experimental_place_dataset_on_device``: accepted, no effect -- input pipelines always run on the host
      (numpy); batches reach the devices through ``experimental_fetch_to_device``.
    - ``split``: ``"tf"`` (default) chooses between the balanced and the legacy per-replica split with
      tf.distribute's rule; ``"balanced"`` always uses the balanced split.
    """

    def __init__(self, experimental_fetch_to_device=None, experimental_replication_mode=InputReplicationMode.PER_WORKER,
                 experimental_place_dataset_on_device=False, experimental_per_replica_buffer_size=2,
                 experimental_prefetch_to_device=None, split="tf"):
        if experimental_fetch_to_device is None:
            experimental_fetch_to_device = True if experimental_prefetch_to_device is None else bool(
                experimental_prefetch_to_device)
        self.experimental_fetch_to_device = bool(experimental_fetch_to_device)
        if experimental_replication_mode not in (InputReplicationMode.PER_WORKER, InputReplicationMode.PER_REPLICA):
            raise ValueError(f"InputOptions: unknown experimental_replication_mode {experimental_replication_mode!r}")
        self.experimental_replication_mode = experimental_replication_mode
        self.experimental_place_dataset_on_device = bool(experimental_place_dataset_on_device)
        if int(experimental_per_replica_buffer_size) < 0:
            raise ValueError("InputOptions: experimental_per_replica_buffer_size must be >= 0, got "
                             f"{experimental_per_replica_buffer_size!r}")
        self.experimental_per_replica_buffer_size = int(experimental_per_replica_buffer_size)
        if split not in ("tf", "balanced"):
            raise ValueError(f"InputOptions: split must be 'tf' or 'balanced', got {split!r}")
        self.split = split

    @property
    def experimental_prefetch_to_device(self):
        return self.experimental_fetch_to_device


class ReplicaContext:
    """The context of one replica inside ``run`` (tf.distribute.ReplicaContext)."""

    def __init__(self, strategy, replica_id, sizes=None):
        self._strategy = strategy
        self._replica_id = replica_id
        self._sizes = sizes

    @property
    def strategy(self):
        return self._strategy

    @property
    def replica_id_in_sync_group(self):
        return self._replica_id

    @property
    def num_replicas_in_sync(self):
        return self._strategy.num_replicas_in_sync

    @property
    def devices(self):
        return self._strategy.extended.worker_devices

    def _check_active(self, what):
        strategy, ctx = context.current()
        if ctx is not self and not (strategy is None and self._strategy._is_default):
            raise RuntimeError(f"ReplicaContext.{what} can only be called inside the function given to "
                               "strategy.run (in replica context).")

    def all_reduce(self, reduce_op, value, options=None):
        """Every replica receives the combined value (leaf by leaf); the order of the additions is fixed."""
        reduce_op = ReduceOp.parse(reduce_op)
        self._check_active("all_reduce")
        return self._strategy._all_reduce(reduce_op, value)

    def all_gather(self, value, axis=0, options=None):
        self._check_active("all_gather")
        return self._strategy._all_gather(value, axis)

    def merge_call(self, merge_fn, args=(), kwargs=None):
        """Call ``merge_fn(strategy, *args, **kwargs)`` once in cross-replica context; array arguments
        arrive as per-replica values; every replica receives the result."""
        self._check_active("merge_call")
        return self._strategy._merge_call(self, merge_fn, tuple(args), dict(kwargs or {}))

    @property
    def num_examples(self):
        """The true number of examples in this replica's batch on this step (a ragged last step pads the
        batch with zero rows); None when the step's batches are not ragged."""
        return self._sizes

    def example_mask(self, batch_size):
        """A bool vector of length ``batch_size``: True for real examples, False for padding."""
        import jax.numpy as jnp

        if self._sizes is None:
            return jnp.ones((batch_size,), bool)
        return jnp.arange(batch_size) < self._sizes


class Extended:
    """``strategy.extended`` (tf.distribute's ``StrategyExtended``): device and role facts, and the
    cross-replica reduce/update helpers, for the mirrored strategies (variables live on every device)."""

    def __init__(self, strategy):
        self._strategy = strategy

    # ------------------------------------------------------------------ facts
    @property
    def worker_devices(self):
        """This worker's devices, one per local replica (``jax.Device``s)."""
        return tuple(self._strategy._local_devices)

    @property
    def parameter_devices(self):
        """Where variables live: mirrored on every worker device."""
        return self.worker_devices

    def non_slot_devices(self, var_list):
        return self.worker_devices

    @property
    def experimental_between_graph(self):
        """True for multi-worker strategies: each worker runs its own program (tf's between-graph)."""
        return self._strategy.cluster_resolver is not None

    def _is_chief(self) -> bool:
        """tf.distribute's ``is_chief``: the chief (or an evaluator); without a chief task, worker 0; a
        strategy without a cluster is its own chief."""
        r = self._strategy.cluster_resolver
        if r is None or r.task_type is None:
            return True
        if r.task_type in ("chief", "evaluator"):
            return True
        return "chief" not in r.cluster_spec().as_dict() and r.task_type == "worker" and int(r.task_id) == 0

    @property
    def should_checkpoint(self):
        """Whether this worker should save checkpoints (the chief; every single-worker strategy)."""
        return self._is_chief()

    @property
    def should_save_summary(self):
        return self._is_chief()

    @property
    def experimental_should_init(self):
        return True

    should_init = experimental_should_init

    @property
    def experimental_require_static_shapes(self):
        """False, as MirroredStrategy: a step's shapes may change (a new shape compiles ``run`` again) and
        ragged last steps are padded with their true sizes kept, so no ``drop_remainder`` is needed."""
        return False

    # ------------------------------------------------------------------ cross-replica helpers
    def _require_cross_replica(self, what):
        if context.current()[1] is not None or context.trace() is not None:
            raise RuntimeError(f"strategy.extended.{what} requires cross-replica context (outside strategy.run); "
                               "inside run use get_replica_context().all_reduce / merge_call")

    def reduce_to(self, reduce_op, value, destinations, options=None):
        """Combine a per-replica value elementwise across replicas (``reduce(op, value, axis=None)``); the
        result is mirrored on every replica's device (``destinations`` is accepted: mirrored strategies keep
        variables on every device)."""
        self._require_cross_replica("reduce_to")
        reduced = self._strategy.reduce(reduce_op, value, axis=None)
        replicate = getattr(self._strategy, "_replicate", None)
        if replicate is None:
            return reduced
        import jax

        return jax.tree_util.tree_map(replicate, reduced)

    def batch_reduce_to(self, reduce_op, value_destination_pairs, options=None):
        return [self.reduce_to(reduce_op, v, d, options) for v, d in value_destination_pairs]

    def update(self, var, fn, args=(), kwargs=None, group=True):
        """``fn(var, *args, **kwargs)``: in cross-replica context once (every copy of a mirrored variable is
        written); inside ``run`` per replica, the assignment combined by the variable's aggregation."""
        with contextlib.ExitStack() as stack:
            if context.current()[0] is not self._strategy and context.current()[1] is None:
                stack.enter_context(self._strategy.scope())
            return fn(var, *tuple(args), **dict(kwargs or {}))

    def value_container(self, value):
        return value

    def read_var(self, var):
        return var.read_value()

    def variable_created_in_scope(self, v):
        return getattr(v, "_strategy", None) is self._strategy

    def colocate_vars_with(self, colocate_with_variable):
        return contextlib.nullcontext()

    def broadcast_to(self, tensor, destinations):
        replicate = getattr(self._strategy, "_replicate", None)
        return tensor if replicate is None else replicate(tensor)

    def call_for_each_replica(self, fn, args=(), kwargs=None):
        return self._strategy.run(fn, args=args, kwargs=kwargs)


class Strategy:
    """Shared behaviour of strategies; see ``MirroredStrategy`` for the full API."""

    _is_default = False

    def __init__(self):
        self.extended = Extended(self)
        self._default_replica_context = None

    # ------------------------------------------------------------------ scope
    @contextlib.contextmanager
    def scope(self):
        strategy, ctx = context.current()
        if ctx is not None:
            raise RuntimeError("strategy.scope() cannot be entered inside strategy.run (replica context).")
        if strategy is not None and strategy is not self and not strategy._is_default:
            raise ValueError(f"Mixing different strategies in nested scopes is not allowed: {self!r} inside "
                             f"{strategy!r}.")
        context.push(self)
        try:
            yield self
        finally:
            context.pop()

    @property
    def num_replicas_in_sync(self) -> int:
        raise NotImplementedError

    @property
    def cluster_resolver(self):
        return None

    # ------------------------------------------------------------------ values
    def experimental_local_results(self, value):
        """The values of this process's replicas, as a tuple (a plain value gives a 1-tuple)."""
        from .variables import Variable

        if isinstance(value, PerReplica):
            return value.local_values()
        if hasattr(value, "local_values"):  # a SyncOnReadVariable: each replica's own copy
            return value.local_values()
        if isinstance(value, Variable):
            return (value.read_value(),) * len(self._local_replica_ids)
        if isinstance(value, (tuple, list, dict)):  # a nest of per-replica values: a tuple of nests
            import jax

            is_leaf = lambda x: isinstance(x, (PerReplica, Variable))  # noqa: E731
            leaves, treedef = jax.tree_util.tree_flatten(value, is_leaf=is_leaf)
            if any(is_leaf(x) for x in leaves):
                per_leaf = [self.experimental_local_results(x) for x in leaves]
                n = max(len(p) for p in per_leaf)
                per_leaf = [p if len(p) == n else p * n for p in per_leaf]
                return tuple(treedef.unflatten([p[i] for p in per_leaf]) for i in range(n))
        return (value,)

    def experimental_distribute_values_from_function(self, value_fn):
        raise NotImplementedError

    # ------------------------------------------------------------------ input
    def _input_feed(self):
        """The ``feed.InputFeed`` its distributed datasets know it by (the one seam between them)."""
        raise NotImplementedError(f"{type(self).__name__} does not distribute datasets")

    def experimental_distribute_dataset(self, dataset, options=None):
        from .distributed_dataset import DistributedDataset

        return DistributedDataset.from_dataset(self._input_feed(), dataset, options)

    def distribute_datasets_from_function(self, dataset_fn, options=None):
        from .distributed_dataset import DistributedDataset

        return DistributedDataset.from_function(self._input_feed(), dataset_fn, options)

    def experimental_distribute_datasets_from_function(self, dataset_fn, options=None):
        """The old name of ``distribute_datasets_from_function``."""
        return self.distribute_datasets_from_function(dataset_fn, options)

    def experimental_make_numpy_dataset(self, numpy_input):
        """Deprecated in tf.distribute: a dataset over the arrays (kept for ported code). The data is
        sliced by the host pipeline, never embedded in a compiled program."""
        warnings.warn("experimental_make_numpy_dataset is deprecated (as in tf.distribute): use "
                      "Dataset.from_tensor_slices(numpy_input) instead.", DeprecationWarning, stacklevel=2)
        from jaxfeed.pipeline import Dataset

        return Dataset.from_tensor_slices(numpy_input)

    # ------------------------------------------------------------------ reduce helpers
    def _reduce_non_distributed(self, reduce_op, value, axis=None):
        """tf.distribute's rule for a value that is not distributed (``run`` would broadcast it to every
        replica). ``axis=None``: MEAN returns the value; so does SUM with one replica; SUM of a numpy/Python
        value that is all zeros gives zeros (tf's ``reduce_non_distributed_value``); else ValueError.
        With an axis: see :func:`reduce_broadcast_value`."""
        if axis is not None:
            return reduce_broadcast_value(reduce_op, value, axis, self.num_replicas_in_sync)
        if reduce_op == ReduceOp.MEAN or self.num_replicas_in_sync == 1:
            return value
        if _is_host_zeros(value):
            return np.zeros(np.shape(value), np.asarray(value).dtype)
        raise ValueError(f"A non-DistributedValues value {value!r} cannot be reduced with the given reduce op "
                         f"{reduce_op}.")


def _is_host_zeros(value) -> bool:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (np.ndarray, np.generic, int, float, complex)):
        return False
    try:
        return bool(np.all(np.asarray(value) == 0))
    except Exception:  # noqa: BLE001
        return False


def _axes(axis, rank):
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer, tuple, list)):
        raise TypeError(f"Expected `axis` to be an integer, tuple or list not: {axis!r}")
    out = []
    for a in (axis if isinstance(axis, (tuple, list)) else (axis,)):
        a = int(a)
        if not -rank <= a < rank:
            raise ValueError(f"`axis` = {a!r} out of range for `value` with rank {rank}")
        out.append(a + rank if a < 0 else a)
    return tuple(out)


def reduce_broadcast_value(reduce_op, value, axis, num_replicas: int):
    """``Strategy.reduce(op, value, axis)`` of a non-distributed value, as tf.distribute computes it: every
    replica reduces its (broadcast) copy along ``axis`` (an int, tuple or list), then the replicas' results
    are reduced. SUM: the per-replica sum added over the replicas in ``ordered.ordered_sum``'s order (R x
    the sum along axis);
    MEAN: that total divided by the element count along axis over all replicas (R x the count), i.e. the
    value's mean along axis (integer values give a float mean, as tf's ``truediv``). Leaf by leaf for a nest;
    a JAX tracer (inside ``merge_call``) is reduced with ``jax.numpy``."""
    import jax
    import jax.numpy as jnp

    reduce_op = ReduceOp.parse(reduce_op)

    def one(v):
        traced = isinstance(v, jax.core.Tracer)
        a = v if traced else np.asarray(v)
        xp = jnp if traced else np
        axes = _axes(axis, a.ndim)
        per = xp.sum(a, axis=axes, dtype=a.dtype if a.dtype.kind in "fciu" else None)
        total = ordered_sum([per] * int(num_replicas))  # the order of the cross-replica reduction
        if reduce_op == ReduceOp.SUM:
            return total if traced else _to_jax(total)
        count = int(np.prod([a.shape[k] for k in axes], dtype=np.int64)) * int(num_replicas)
        mean = total / count
        if a.dtype.kind in "fc":
            mean = mean.astype(a.dtype)
        elif not traced and not x64_enabled():  # a mean of integers: JAX's default float (float32 without x64)
            mean = np.asarray(mean, np.float32)
        return mean if traced else _to_jax(mean)

    return jax.tree_util.tree_map(one, value)


def _to_jax(x):
    """A host result as a ``jax.Array``: 64-bit values kept in x64 mode, else checked (never narrowed
    silently)."""
    import jax.numpy as jnp

    return jnp.asarray(to_device_dtype(np.asarray(x), "strategy.reduce: the result", x64_enabled(), _WARNED))


class _DefaultStrategy(Strategy):
    """What applies outside any scope: one replica on the default device; ``run`` calls the function."""

    _is_default = True

    def __init__(self):
        super().__init__()
        self._default_replica_context = ReplicaContext(self, 0)

    _local_replica_ids = (0,)

    @property
    def _local_devices(self):
        import jax

        return [jax.devices()[0]]

    @property
    def num_replicas_in_sync(self):
        return 1

    def run(self, fn, args=(), kwargs=None):
        context.push(self, self._default_replica_context)
        try:
            return fn(*args, **(kwargs or {}))
        finally:
            context.pop()

    def _all_reduce(self, reduce_op, value):
        return value

    def _all_gather(self, value, axis):
        return value

    def _merge_call(self, ctx, merge_fn, args, kwargs):
        return merge_fn(self, *args, **kwargs)

    def reduce(self, reduce_op, value, axis=None):
        reduce_op = ReduceOp.parse(reduce_op)
        if isinstance(value, DistributedValues):
            raise ValueError("the default strategy cannot reduce a value distributed by another strategy")
        if axis is None:  # one replica: tf's default strategy returns the value for SUM and MEAN
            return value
        return reduce_broadcast_value(reduce_op, value, axis, 1)

    def gather(self, value, axis):
        """One replica: the value itself (tf's default strategy)."""
        if isinstance(value, DistributedValues):
            raise ValueError("the default strategy cannot gather a value distributed by another strategy")
        return value

    def experimental_distribute_values_from_function(self, value_fn):
        return value_fn(ValueContext(0, 1))

    def experimental_distribute_dataset(self, dataset, options=None):
        """One replica, one worker: the dataset itself (as tf.distribute's default strategy)."""
        return dataset

    def distribute_datasets_from_function(self, dataset_fn, options=None):
        ds = dataset_fn(InputContext())
        from jaxfeed.pipeline import Dataset

        if not isinstance(ds, Dataset):
            raise TypeError(f"distribute_datasets_from_function: dataset_fn must return a Dataset, got "
                            f"{type(ds).__name__}")
        return ds

    def __repr__(self):
        return "<default strategy>"


_DEFAULT = None


def default_strategy() -> _DefaultStrategy:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = _DefaultStrategy()
    return _DEFAULT


def as_numpy(x):
    return np.asarray(x)
