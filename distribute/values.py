"""Distributed values: ``PerReplica`` (one value per replica, a plain ``jax.Array`` underneath) and the enums.

A ``PerReplica`` holds, for every leaf of a nest, one global ``jax.Array`` sharded along axis 0 over the
strategy's replica mesh axis (``NamedSharding(mesh, P('replica'))``):

- *concatenated* (batches from a distributed dataset): global shape ``(N * cap, ...)``; replica i owns rows
  ``[i * cap, (i + 1) * cap)``; when ``sizes`` is set (a ragged step), replica i's true batch is the first
  ``sizes[i]`` of them and the rest is zero padding. A dense step is simply the global batch.
- *stacked* (results of ``run``, values from ``experimental_distribute_values_from_function``): global shape
  ``(N, ...)``; replica i's value is row i.

``.arrays`` gives the underlying nest of ``jax.Array``s for JAX code.

As in tf.distribute, a step of a distributed dataset (or a result of ``run``) is *regrouped*: a nest whose
leaves are ``PerReplica`` values (a ``(features, labels)`` step is a tuple of two), and the specs of
distributed datasets are the same nest of ``PerReplicaSpec``.

*Host* values (``host=True``) hold numpy arrays on the host instead of ``jax.Array``s: string components
(which no device holds, as in TF where they stay on the CPU) and every component under
``InputOptions(experimental_fetch_to_device=False)``.

Values enter JAX through :func:`to_device_dtype`: with JAX's x64 mode off, 64-bit values are narrowed to
32 bits only when every value fits (reported once per component), otherwise they raise.
"""

from __future__ import annotations

import enum
import warnings

import numpy as np


class ReduceOp(enum.Enum):
    SUM = "SUM"
    MEAN = "MEAN"

    @staticmethod
    def parse(op) -> "ReduceOp":
        if isinstance(op, ReduceOp):
            return op
        if isinstance(op, str) and op.upper() in ("SUM", "MEAN"):
            return ReduceOp[op.upper()]
        raise ValueError(f"{op!r} is not a valid ReduceOp (use ReduceOp.SUM, ReduceOp.MEAN, 'SUM' or 'MEAN')")

    @staticmethod
    def from_variable_aggregation(aggregation) -> "ReduceOp":
        aggregation = VariableAggregation(aggregation)
        if aggregation == VariableAggregation.SUM:
            return ReduceOp.SUM
        if aggregation == VariableAggregation.MEAN:
            return ReduceOp.MEAN
        raise ValueError(f"Could not convert from VariableAggregation {aggregation} to ReduceOp")


class VariableAggregation(enum.Enum):
    NONE = 0
    SUM = 1
    MEAN = 2
    ONLY_FIRST_REPLICA = 3


class VariableSynchronization(enum.Enum):
    AUTO = 0
    NONE = 1
    ON_WRITE = 2
    ON_READ = 3


class DistributedValues:
    """Base class of values with one component per replica."""


class PerReplica(DistributedValues):
    """One value per replica; see the module docstring for the layout."""

    def __init__(self, treedef, leaves, strategy, stacked: bool, sizes=None, cap=None, host: bool = False):
        self._treedef = treedef
        self._leaves = list(leaves)
        self._strategy = strategy
        self.stacked = stacked
        self.sizes = None if sizes is None else np.asarray(sizes, dtype=np.int64)
        self.cap = cap
        self.host = bool(host)  # numpy on the host (strings; experimental_fetch_to_device=False)

    # ------------------------------------------------------------------ views
    @property
    def arrays(self):
        """The nest of global ``jax.Array``s (sharded over the replica axis)."""
        return self._treedef.unflatten(self._leaves)

    @property
    def num_replicas(self) -> int:
        return self._strategy.num_replicas_in_sync

    def _replica_block(self, leaf, shard_data, replica: int):
        if self.stacked:
            block = shard_data[0]
            if self.sizes is not None and block.ndim and block.shape[0] == self.cap:
                block = block[: int(self.sizes[replica])]
            return block
        if self.sizes is not None:
            return shard_data[: int(self.sizes[replica])]
        return shard_data

    def local_values(self) -> tuple:
        """This process's replicas' values, in replica order (the tf.distribute ``.values``)."""
        ids = self._strategy._local_replica_ids
        if self.host:  # numpy arrays holding this process's replicas, in local replica order
            out = []
            for i, r in enumerate(ids):
                leaves = []
                for arr in self._leaves:
                    if self.stacked:
                        v = arr[i]
                    else:
                        per = arr.shape[0] // len(ids)
                        v = arr[i * per:(i + 1) * per]
                        v = v[: int(self.sizes[r])] if self.sizes is not None else v
                    leaves.append(v)
                out.append(self._treedef.unflatten(leaves))
            return tuple(out)
        per_leaf = []
        for leaf in self._leaves:
            blocks = {}
            for shard in leaf.addressable_shards:
                rid = self._strategy._replica_of_device(shard.device)
                if rid not in blocks:
                    blocks[rid] = self._replica_block(leaf, shard.data, rid)
            per_leaf.append([blocks[r] for r in ids])
        return tuple(self._treedef.unflatten([col[i] for col in per_leaf]) for i in range(len(ids)))

    values = property(local_values)

    def host_values(self) -> list:
        """Every replica's value (all processes), as numpy nests, in replica order. A collective when
        several processes take part: every process must call it."""
        if self.host:
            if getattr(self._strategy, "_multi_process", False):
                raise ValueError("the replicas' host (numpy) values of other workers cannot be read: use "
                                 "experimental_local_results for this worker's replicas")
            return list(self.local_values())
        full = self._strategy._gather_to_host(self._leaves)
        n = self.num_replicas
        out = []
        for r in range(n):
            leaves = []
            for arr in full:
                if self.stacked:
                    v = arr[r]
                    if self.sizes is not None and v.ndim and v.shape[0] == self.cap:
                        v = v[: int(self.sizes[r])]
                else:
                    per = arr.shape[0] // n
                    v = arr[r * per:(r + 1) * per]
                    if self.sizes is not None:
                        v = v[: int(self.sizes[r])]
                leaves.append(v)
            out.append(self._treedef.unflatten(leaves))
        return out

    @property
    def dtype(self):
        """The dtype of a single-leaf value (what each replica's array has)."""
        return self._leaves[0].dtype if len(self._leaves) == 1 else None

    def __repr__(self):
        layout = ("host " if self.host else "") + ("stacked" if self.stacked else "batch")
        ragged = f", sizes={self.sizes.tolist()}" if self.sizes is not None else ""
        shapes = [tuple(x.shape) for x in self._leaves]
        return f"PerReplica({layout}, replicas={self.num_replicas}, global shapes={shapes}{ragged})"


class Mirrored(DistributedValues):
    """A value that is the same on every replica (what ``MirroredVariable.value()`` gives)."""


class PerReplicaSpec:
    """The spec of a per-replica value: one spec per replica (tf.distribute's ``PerReplicaSpec``).

    ``shape`` / ``dtype`` are the replicas' common shape (unknown dimensions where they differ) and dtype."""

    __slots__ = ("_value_specs",)

    def __init__(self, *value_specs):
        self._value_specs = tuple(value_specs)

    @property
    def value_specs(self) -> tuple:
        return self._value_specs

    @property
    def num_replicas(self) -> int:
        return len(self._value_specs)

    @property
    def shape(self):
        common = self._value_specs[0]
        for s in self._value_specs[1:]:
            common = common.most_specific_compatible(s)
        return common.shape

    @property
    def dtype(self):
        return self._value_specs[0].dtype

    def __eq__(self, other):
        return isinstance(other, PerReplicaSpec) and other._value_specs == self._value_specs

    def __hash__(self):
        return hash(self._value_specs)

    def __repr__(self):
        return f"PerReplicaSpec({', '.join(map(repr, self._value_specs))})"


# ---------------------------------------------------------------------------------------- dtypes on devices
_NARROW = {np.dtype(np.int64): np.dtype(np.int32), np.dtype(np.uint64): np.dtype(np.uint32),
           np.dtype(np.float64): np.dtype(np.float32), np.dtype(np.complex128): np.dtype(np.complex64)}
NARROWED = frozenset(_NARROW)  # the dtypes a device holds only in JAX's x64 mode


def x64_enabled() -> bool:
    """JAX's x64 mode as this thread sees it (``jax.enable_x64`` is thread-local: callers capture it on the
    user's thread and hand it to threads they start)."""
    import jax

    return bool(jax.config.jax_enable_x64)


def device_dtype(dtype, x64: bool):
    """The dtype a value of ``dtype`` has once on a JAX device (64-bit types need x64 mode)."""
    dtype = np.dtype(dtype)
    return dtype if x64 else _NARROW.get(dtype, dtype)


def to_device_dtype(arr, where: str, x64: bool, warned: set | None = None):
    """``arr`` (numpy) as the dtype a device holds, never changing a value silently.

    With x64 mode on, or a dtype that is not 64-bit: ``arr`` unchanged. Otherwise the 64-bit values are
    narrowed to 32 bits when every one of them fits (integers in range; floats within float32's range, then
    rounded to the nearest float32), reported by one warning per ``where`` (kept in ``warned``); a value
    that does not fit raises ``InvalidArgumentError`` naming ``where`` and the remedies."""
    arr = np.asarray(arr)
    narrow = None if x64 else _NARROW.get(arr.dtype)
    if narrow is None:
        return arr
    if arr.dtype.kind in "iu":
        info = np.iinfo(narrow)
        outside = (arr < info.min) | (arr > info.max)
        out = arr.astype(narrow)
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            out = arr.astype(narrow)
        outside = (np.isinf(out.real) & ~np.isinf(arr.real)) | (np.isinf(out.imag) & ~np.isinf(arr.imag))
    if outside.any():
        from jaxfeed.pipeline.errors import InvalidArgumentError

        raise InvalidArgumentError(
            f"{where}: the {arr.dtype} value {arr[outside].reshape(-1)[0]!r} does not fit in {narrow}, the widest "
            "type JAX places on a device while its x64 mode is off. Enable x64 mode before creating any array "
            "(jax.config.update('jax_enable_x64', True) or JAX_ENABLE_X64=1) to keep 64-bit values, or cast the "
            f"component in the pipeline (a map that makes the values fit {narrow} and casts them).", where)
    if warned is not None and where not in warned:
        warned.add(where)
        warnings.warn(f"{where}: {arr.dtype} values are placed on the devices as {narrow} (JAX's x64 mode is off and "
                      f"the values fit). Enable jax_enable_x64 to keep 64-bit values, or cast to {narrow} where the "
                      "values are made (in the pipeline); a value that does not fit raises.", UserWarning, stacklevel=3)
    return out
