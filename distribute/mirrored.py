"""``MirroredStrategy`` on JAX: replicas are devices of a mesh axis, ``run`` is a cached
``jit(shard_map(fn))``, reductions have a fixed order.

- The mesh is ``Mesh(devices.reshape(R, L), ('replica', 'logical'))``: R replicas of L logical devices
  (L = 1 unless the strategy was built with ``num_logical_devices``).
- ``run(fn, args, kwargs)`` compiles ``fn`` once per input structure (tree structure, shapes, dtypes, the
  strategy's live variables, and the values of non-array arguments); later steps with the same structure
  reuse the executable. Distributed arguments are split per replica, everything else is broadcast.
- ``all_reduce``: an ``all_gather`` then additions in one fixed tree over the replica index
  ((v0 + v1) + (v2 + v3)) + ... (``ordered.py``), the same program on every replica, so the result is
  bitwise identical on all replicas and across runs.
- ``reduce``: the replicas' values go to the host and are combined there in a fixed order: ``axis=None``
  adds replica values in that same tree; ``axis=k`` concatenates all replicas' values along k (true batch
  sizes, padding removed) and sums once, so a MEAN divides by the true number of examples and, with the
  balanced split, the result does not depend on how many replicas the batch was split over. A value that
  is not distributed is treated as ``run`` would treat it, broadcast to every replica (tf.distribute's
  rule): with an axis, SUM gives R x its sum along the axis and MEAN its mean; with ``axis=None``, MEAN
  returns it and SUM raises ValueError when R > 1.
- ``gather(value, axis)``: every replica's value (true rows of a ragged step) concatenated along ``axis``,
  in replica order, on the host's default device.
- dtypes: values enter JAX through ``values.to_device_dtype`` (64-bit ones need x64 mode or must fit in 32
  bits; narrowing is reported once per argument or component); string (host) values cannot enter ``run``.
"""

from __future__ import annotations

import re

import numpy as np

from . import context
from .feed import InputFeed
from .logical import LOGICAL, LogicalDevices
from .ordered import ordered_sum, psum_in_order
from .strategy import ReplicaContext, Strategy, ValueContext
from .values import PerReplica, ReduceOp, to_device_dtype, x64_enabled
from .variables import MirroredVariable, SyncOnReadVariable, Trace, Variable

REPLICA = "replica"
# Steps of ``run`` allowed in flight before the next one waits for the oldest (many collective programs in
# flight deadlock JAX's CPU backend).
MAX_INFLIGHT = 8


def resolve_devices(devices):
    """``None``: every local GPU (else every local device); otherwise JAX devices or strings like
    ``"cpu:0"``, ``"/gpu:1"``, ``"/job:localhost/replica:0/task:0/device:CPU:0"``."""
    import jax

    local = jax.local_devices()
    if devices is None:
        gpus = [d for d in local if d.platform == "gpu"]
        return gpus or local
    if isinstance(devices, (str, jax.Device)):
        devices = [devices]
    out = []
    for d in devices:
        if isinstance(d, jax.Device):
            out.append(d)
            continue
        if not isinstance(d, str):
            raise TypeError(f"MirroredStrategy: a device must be a jax.Device or a string like 'cpu:0', got {d!r}")
        m = re.search(r"(cpu|gpu|tpu)\s*:\s*(\d+)\s*$", d.lower())
        if not m:
            raise ValueError(f"MirroredStrategy: cannot parse device string {d!r} (expected e.g. 'cpu:0', '/gpu:1')")
        platform, index = m.group(1), int(m.group(2))
        candidates = [x for x in local if x.platform == platform]
        if index >= len(candidates):
            raise ValueError(f"MirroredStrategy: device {d!r} does not exist; this process has {len(candidates)} "
                             f"{platform} device(s): {candidates}")
        out.append(candidates[index])
    if not out:
        raise ValueError("MirroredStrategy: the device list is empty")
    if len({(x.platform, x.id) for x in out}) != len(out):
        raise ValueError(f"MirroredStrategy: the device list {devices!r} names a device twice")
    return out


class _TracedPerReplica:
    """Per-replica values inside ``merge_call`` (tracers, one per replica)."""

    def __init__(self, values):
        self.values = tuple(values)


class MeshStrategy(LogicalDevices, Strategy):
    """The engine shared by MirroredStrategy and MultiWorkerMirroredStrategy."""

    def _setup(self, devices, local_devices, num_logical_devices=1):
        import jax
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

        L = int(num_logical_devices)
        if L < 1 or len(devices) % L:
            raise ValueError(f"num_logical_devices={num_logical_devices!r} must divide the number of devices "
                             f"({len(devices)})")
        self._devices = list(devices)
        self._L = L
        self._mesh = Mesh(np.array(self._devices, dtype=object).reshape(-1, L), (REPLICA, LOGICAL))
        self._replica_of = {d.id: i // L for i, d in enumerate(self._devices)}
        local_ids = {d.id for d in local_devices}
        self._local_devices = [d for d in self._devices if d.id in local_ids]
        self._local_replica_ids = sorted({self._replica_of[d.id] for d in self._local_devices})
        self._rep_sharding = NamedSharding(self._mesh, P())
        self._batch_sharding = NamedSharding(self._mesh, P(REPLICA))
        self._cache: dict = {}
        self._variables: list = []  # weak references to this strategy's mirrored variables
        self._gather_fn = None
        self._multi_process = jax.process_count() > 1
        self.trace_count = 0  # how many times run traced a function (for tests and measurements)
        self._iterator_uids = 0
        self._inflight: list = []  # one output of each recent run step (bounded: see MAX_INFLIGHT)
        self._warned: set = set()  # where 64-bit values were reported narrowed (once each)

    # ------------------------------------------------------------------ input workers
    def _input_feed(self) -> InputFeed:
        """What its distributed datasets know of it: the layout, the step agreement, the placement."""
        num_workers, worker_index = self._input_workers()
        return InputFeed(num_replicas=self.num_replicas_in_sync, num_workers=num_workers, worker_index=worker_index,
                         local_replicas=self._local_replica_ids, multi_process=self._multi_process, owner=self,
                         place=self._place_local_rows, agree_step=self._agree_step,
                         next_iterator_id=self._next_iterator_uid)

    def _input_workers(self):
        """(number of input workers, this worker's index)."""
        return 1, 0

    def _next_iterator_uid(self) -> int:
        self._iterator_uids += 1
        return self._iterator_uids

    def _agree_step(self, uid, generation, step, local_sizes, stop=None, reported=False):
        """Every replica's batch size on this step (one worker: its own)."""
        return list(local_sizes)

    # ------------------------------------------------------------------ facts
    @property
    def num_replicas_in_sync(self) -> int:
        return len(self._devices) // self._L

    @property
    def mesh(self):
        """The ``jax.sharding.Mesh`` (axes 'replica' and 'logical')."""
        return self._mesh

    def _replica_of_device(self, device) -> int:
        return self._replica_of[device.id]

    # ------------------------------------------------------------------ placement
    def _replicate(self, x):
        import jax

        if isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer):
            if x.sharding == self._rep_sharding:
                return x
            if self._multi_process and not x.is_fully_addressable:
                raise ValueError("cannot replicate a global array that is not fully addressable")
            x = np.asarray(x)
        if isinstance(x, jax.core.Tracer):
            return x
        x = np.asarray(x)
        if not self._multi_process:
            return jax.device_put(x, self._rep_sharding)
        return jax.make_array_from_callback(x.shape, self._rep_sharding, lambda idx: x[idx])

    def _per_replica_from_local(self, local_stacks, stacked, sizes=None, cap=None, treedef=None):
        """Global arrays from this process's per-replica data (numpy, replica order, local replicas only)."""
        import jax

        leaves = []
        n = self.num_replicas_in_sync
        if not self._multi_process:  # one process: device_put splits the global arrays itself (faster), all
            return list(jax.device_put(list(local_stacks), self._batch_sharding))  # leaves in one call
        for local in local_stacks:
            if stacked:
                gshape = (n,) + local.shape[1:]
            else:
                gshape = (local.shape[0] // max(1, len(self._local_replica_ids)) * n,) + local.shape[1:]
            leaves.append(jax.make_array_from_process_local_data(self._batch_sharding, local, gshape))
        return leaves

    def _place_local_rows(self, rows_list):
        """Components of one step, each the rows of this worker's replicas (each replica's piece after the
        other), as global arrays split over the replica axis (one placement call for all of them)."""
        return self._per_replica_from_local(rows_list, stacked=False)

    def _gather_to_host(self, leaves):
        import jax

        if not self._multi_process:
            return [np.asarray(x) for x in leaves]
        if self._gather_fn is None:
            self._gather_fn = jax.jit(lambda xs: xs, out_shardings=self._rep_sharding)
        return [np.asarray(y.addressable_data(0)) for y in self._gather_fn(list(leaves))]

    def _register_variable(self, var):
        import weakref

        self._variables = [r for r in self._variables if r() is not None]
        self._variables.append(weakref.ref(var))

    def _live_variables(self):
        out = []
        for r in self._variables:
            v = r()
            if v is not None:
                out.append(v)
        return out

    # ------------------------------------------------------------------ collectives (inside run)
    def _all_reduce(self, reduce_op, value):
        import jax
        import jax.numpy as jnp

        n = self.num_replicas_in_sync

        def one(x):
            x = jnp.asarray(x.read_value() if isinstance(x, Variable) else x)
            s = psum_in_order(x, REPLICA)
            if reduce_op == ReduceOp.MEAN:
                s = s / n if jnp.issubdtype(s.dtype, jnp.inexact) else s // n
            return s

        return jax.tree_util.tree_map(one, value, is_leaf=lambda x: isinstance(x, Variable))

    def _all_gather(self, value, axis):
        import jax
        from jax import lax

        return jax.tree_util.tree_map(lambda x: lax.all_gather(x, REPLICA, axis=axis, tiled=True), value)

    def _agree(self, value):
        import jax.numpy as jnp
        from jax import lax

        g = lax.all_gather(value, REPLICA)
        return g[0], jnp.all(g == g[0])

    def _first_replica(self, value):
        from jax import lax

        return lax.all_gather(value, REPLICA)[0]

    def _merge_call(self, ctx, merge_fn, args, kwargs):
        import jax
        from jax import lax

        n = self.num_replicas_in_sync

        def gather(x):
            if isinstance(x, Variable):
                return x
            try:
                g = lax.all_gather(x, REPLICA)
            except TypeError:
                return x
            return _TracedPerReplica([g[i] for i in range(n)])

        args2, kwargs2 = jax.tree_util.tree_map(gather, (args, kwargs), is_leaf=lambda x: isinstance(x, Variable))
        context.push(self, None)
        try:
            return merge_fn(self, *args2, **kwargs2)
        finally:
            context.pop()

    # ------------------------------------------------------------------ run
    def run(self, fn, args=(), kwargs=None):
        """Run ``fn`` once per replica (compiled once per input structure); see the module docstring."""
        import jax

        kwargs = {} if kwargs is None else kwargs
        if not isinstance(args, (tuple, list)):
            raise TypeError(f"run: `args` must be a tuple or list, got {type(args).__name__}")
        if not isinstance(kwargs, dict):
            raise TypeError(f"run: `kwargs` must be a dict, got {type(kwargs).__name__}")
        if context.trace() is not None or context.current()[1] is not None:
            raise RuntimeError("strategy.run cannot be called inside strategy.run")
        is_leaf = lambda x: isinstance(x, (PerReplica, Variable))  # noqa: E731
        leaves, treedef = jax.tree_util.tree_flatten((tuple(args), kwargs), is_leaf=is_leaf)
        kinds, dyn, specs = [], [], []
        sizes = cap = None
        for i, leaf in enumerate(leaves):
            if isinstance(leaf, PerReplica):
                if leaf._strategy is not self:
                    raise ValueError(f"run: argument {i} is a distributed value of another strategy "
                                     f"({leaf._strategy!r}); distribute it with this strategy")
                if leaf.sizes is not None:
                    if sizes is not None and (not np.array_equal(sizes, leaf.sizes) or cap != leaf.cap):
                        raise ValueError("run: distributed arguments from different steps (different per-replica "
                                         f"batch sizes {sizes.tolist()} vs {leaf.sizes.tolist()})")
                    sizes, cap = leaf.sizes, leaf.cap
                if leaf.host:
                    leaf = self._host_to_device(leaf, f"run: argument leaf {i}")
                kinds.append(("pr", leaf._treedef, len(leaf._leaves), leaf.stacked))
                dyn.extend(leaf._leaves)
                specs.extend([REPLICA] * len(leaf._leaves))
            elif isinstance(leaf, MirroredVariable):
                if leaf._strategy is not self:
                    raise ValueError(f"run: variable {leaf.name!r} belongs to another strategy")
                kinds.append(("var", leaf))
            elif _is_array_like(leaf):
                if isinstance(leaf, Variable):
                    leaf = leaf.read_value()
                elif isinstance(leaf, (np.ndarray, np.generic)):
                    leaf = to_device_dtype(leaf, f"run: argument leaf {i}", x64_enabled(), self._warned)
                kinds.append(("rep",))
                dyn.append(self._replicate(leaf))
                specs.append(None)
            else:
                try:
                    hash(leaf)
                except TypeError:
                    raise TypeError(f"run: argument leaf {i} ({type(leaf).__name__}) is neither an array nor "
                                    "hashable; pass arrays, numbers, or hashable Python constants") from None
                kinds.append(("static", leaf))
        if sizes is not None:
            dyn.append(self._per_replica_from_local([np.asarray(sizes, np.int32)[self._local_replica_ids]],
                                                    stacked=True)[0])
            specs.append(REPLICA)
        variables = self._live_variables()
        key = (fn, treedef, tuple(_kind_key(k) for k in kinds),
               tuple((x.shape, x.dtype, s) for x, s in zip(dyn, specs)),
               tuple((id(v), v.shape, v.dtype) for v in variables), sizes is not None)
        entry = self._cache.get(key)
        if entry is None:
            entry = self._compile(fn, treedef, kinds, specs, variables, sizes is not None)
            self._cache[key] = entry
        compiled, meta = entry
        outs, new_vals, new_local, flags = compiled(tuple(v._value for v in variables), tuple(dyn))
        for v, val in zip(meta["assigned"], new_vals):
            v._value = val
        for v, val in zip(meta["assigned_local"], new_local):
            v._value = val
        for v, f in zip(meta["flagged"], flags):
            v._add_pending(f)
        token = next(iter(outs or new_vals or new_local or flags), None)
        if token is not None:
            self._inflight.append(token)
            if len(self._inflight) > MAX_INFLIGHT:
                self._inflight.pop(0).block_until_ready()
        return self._wrap_outputs(meta, outs, sizes, cap)

    def _host_to_device(self, value, where):
        """A host ``PerReplica`` (numpy) placed on the replicas' devices; strings cannot be."""
        if any(np.asarray(x).dtype == object for x in value._leaves):
            raise TypeError(f"{where} is a per-replica string value: strings stay on the host (no JAX device holds "
                            "them) and cannot enter a compiled function. Pass only the numeric components to run "
                            "(e.g. run(fn, args=(features,)) and use the strings outside it, through "
                            "strategy.experimental_local_results), or decode them to numbers in the pipeline.")
        x64 = x64_enabled()
        leaves = [to_device_dtype(np.asarray(x), where, x64, self._warned) for x in value._leaves]
        placed = self._per_replica_from_local(leaves, stacked=value.stacked)
        return PerReplica(value._treedef, placed, self, stacked=value.stacked, sizes=value.sizes, cap=value.cap)

    def _compile(self, fn, treedef, kinds, specs, variables, ragged):
        import jax
        import jax.numpy as jnp
        from jax.sharding import PartitionSpec as P

        meta: dict = {}
        strategy = self
        # one replica in one process: outputs are the replica's values themselves (no stacking, no slicing)
        single = self.num_replicas_in_sync == 1 and not self._multi_process

        def body(var_vals, dyn_vals):
            strategy.trace_count += 1
            dyn_it = iter(dyn_vals)
            rebuilt = []
            for k in kinds:
                if k[0] == "pr":
                    _, tdef, n, stacked = k
                    blocks = [next(dyn_it) for _ in range(n)]
                    rebuilt.append(tdef.unflatten([b[0] if stacked else b for b in blocks]))
                elif k[0] == "var":
                    rebuilt.append(k[1])
                elif k[0] == "rep":
                    rebuilt.append(next(dyn_it))
                else:
                    rebuilt.append(k[1])
            replica_sizes = next(dyn_it)[0] if ragged else None
            args, kwargs = jax.tree_util.tree_unflatten(treedef, rebuilt)
            # sync-on-read variables arrive as this replica's (1, ...) block of their stacked value
            var_vals = [x[0] if isinstance(v, SyncOnReadVariable) else x for v, x in zip(variables, var_vals)]
            trace = Trace(strategy, variables, var_vals)
            ctx = ReplicaContext(strategy, jax.lax.axis_index(REPLICA), replica_sizes)
            previous = context.trace()
            context.set_trace(trace)
            context.push(strategy, ctx)
            try:
                result = fn(*args, **kwargs)
            finally:
                context.pop()
                context.set_trace(previous)
            out_leaves, out_tree = jax.tree_util.tree_flatten(
                result, is_leaf=lambda x: isinstance(x, Variable))
            arrays, out_kinds = [], []
            for leaf in out_leaves:
                if isinstance(leaf, Variable):
                    leaf = leaf.read_value()
                try:
                    a = jnp.asarray(leaf)
                except TypeError:
                    out_kinds.append(("static", leaf))
                    continue
                out_kinds.append(("array", a.shape))
                arrays.append(a if single else a[None])
            mirrored = [v for v in trace.assigned if not isinstance(v, SyncOnReadVariable)]
            local = [v for v in trace.assigned if isinstance(v, SyncOnReadVariable)]
            meta.update(out_tree=out_tree, out_kinds=out_kinds, assigned=mirrored, assigned_local=local,
                        flagged=[v for v, _ in trace.flags])
            new_vals = tuple(trace.read(v) for v in mirrored)
            new_local = tuple(trace.read(v)[None] for v in local)
            flags = tuple(f for _, f in trace.flags)
            return tuple(arrays), new_vals, new_local, flags

        var_specs = tuple(P(REPLICA) if isinstance(v, SyncOnReadVariable) else P() for v in variables)
        in_specs = (var_specs, tuple(P(REPLICA) if s else P() for s in specs))
        out_specs = (P() if single else P(REPLICA), P(), P(REPLICA), P())
        mapped = jax.shard_map(body, mesh=self._mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False,
                               **({"axis_names": frozenset({REPLICA})} if self._L > 1 else {}))
        return jax.jit(mapped), meta

    def _wrap_outputs(self, meta, outs, sizes, cap):
        import jax

        it = iter(outs)
        leaves = []
        n = self.num_replicas_in_sync
        for kind in meta["out_kinds"]:
            if kind[0] == "static":
                leaves.append(kind[1])
                continue
            arr = next(it)
            if n == 1 and not self._multi_process:
                leaves.append(arr)  # compiled without the replica axis (see _compile)
                continue
            ragged = sizes is not None and len(kind[1]) >= 1 and kind[1][0] == cap
            leaves.append(PerReplica(jax.tree_util.tree_structure(0), [arr], self, stacked=True,
                                     sizes=sizes if ragged else None, cap=cap if ragged else None))
        return jax.tree_util.tree_unflatten(meta["out_tree"], leaves)

    # ------------------------------------------------------------------ reduce
    def reduce(self, reduce_op, value, axis=None):
        """Combine per-replica values (on the host, in a fixed order); see the module docstring."""
        import jax
        import jax.numpy as jnp

        reduce_op = ReduceOp.parse(reduce_op)
        if isinstance(value, _TracedPerReplica):
            return self._traced_reduce(reduce_op, value, axis)
        if isinstance(value, Variable):
            value = value.read_value()
        if not isinstance(value, PerReplica):
            if isinstance(value, (tuple, list, dict)) and any(
                    isinstance(x, PerReplica) for x in jax.tree_util.tree_leaves(
                        value, is_leaf=lambda x: isinstance(x, PerReplica))):
                return jax.tree_util.tree_map(lambda v: self.reduce(reduce_op, v, axis), value,
                                              is_leaf=lambda x: isinstance(x, PerReplica))
            return self._reduce_non_distributed(reduce_op, value, axis)
        if value._strategy is not self:
            raise ValueError(f"reduce: the value was distributed by another strategy ({value._strategy!r})")
        if value.host and any(np.asarray(x).dtype == object for x in value._leaves):
            raise TypeError("reduce: a per-replica string value cannot be reduced (strings stay on the host); use "
                            "strategy.gather or experimental_local_results to collect it")
        replicas = value.host_values()
        leaves = [jax.tree_util.tree_leaves(r) for r in replicas]
        out = [_host_reduce(reduce_op, [lv[j] for lv in leaves], axis) for j in range(len(leaves[0]))]
        x64 = x64_enabled()
        # a MEAN of integers along an axis is a float (tf's truediv): JAX's default float, float32 without x64
        out = [np.asarray(x).astype(np.float32) if not x64 and np.asarray(x).dtype == np.float64 and
               np.asarray(lv0).dtype.kind in "iub" else x for x, lv0 in zip(out, leaves[0])]
        out = [jnp.asarray(to_device_dtype(np.asarray(x), "strategy.reduce: the result", x64, self._warned))
               for x in out]
        return jax.tree_util.tree_unflatten(value._treedef, out)

    def gather(self, value, axis):
        """Every replica's value (all processes; a ragged step's true rows) concatenated along ``axis``, in
        replica order (tf.distribute's ``Strategy.gather``; cross-replica context only). A value that is not
        distributed is returned as it is; a nest is gathered leaf by leaf. String (host) values give numpy
        arrays; the others ``jax.Array``s (dtypes as ``reduce``'s)."""
        import jax
        import jax.numpy as jnp

        if context.trace() is not None or context.current()[1] is not None:
            raise RuntimeError("strategy.gather requires cross-replica context; inside strategy.run use "
                               "get_replica_context().all_gather(value, axis) instead")
        if isinstance(value, Variable):
            value = value.read_value()
        if not isinstance(value, PerReplica):
            if isinstance(value, (tuple, list, dict)):
                return jax.tree_util.tree_map(lambda v: self.gather(v, axis), value,
                                              is_leaf=lambda x: isinstance(x, (PerReplica, Variable)))
            return value
        if value._strategy is not self:
            raise ValueError(f"gather: the value was distributed by another strategy ({value._strategy!r})")
        replicas = value.host_values()
        leaves = [jax.tree_util.tree_leaves(r) for r in replicas]
        out = []
        for j in range(len(leaves[0])):
            parts = [np.asarray(lv[j]) for lv in leaves]
            if parts[0].ndim == 0:
                raise ValueError("gather: the replicas' values are scalars; there is no axis to concatenate them "
                                 "along (use reduce, or experimental_local_results)")
            rank = parts[0].ndim
            if not -rank <= int(axis) < rank:
                raise ValueError(f"gather: axis {axis} is out of range for per-replica values of rank {rank}")
            try:
                cat = np.concatenate(parts, axis=int(axis))
            except ValueError as e:
                raise ValueError(f"gather: the replicas' values differ in shape outside axis {axis}: "
                                 f"{[p.shape for p in parts]}") from e
            if cat.dtype == object:
                out.append(cat)
            else:
                out.append(jnp.asarray(to_device_dtype(cat, "strategy.gather: the result", x64_enabled(),
                                                       self._warned)))
        return jax.tree_util.tree_unflatten(value._treedef, out)

    def _traced_reduce(self, reduce_op, value, axis):
        import jax.numpy as jnp

        vals = value.values
        if axis is None:
            s = ordered_sum(vals)
            return s / len(vals) if reduce_op == ReduceOp.MEAN else s
        cat = jnp.concatenate(vals, axis=axis)
        s = jnp.sum(cat, axis=axis)
        return s / cat.shape[axis] if reduce_op == ReduceOp.MEAN else s

    # ------------------------------------------------------------------ values
    def experimental_local_results(self, value):
        if isinstance(value, _TracedPerReplica):
            return value.values
        return super().experimental_local_results(value)

    def experimental_distribute_values_from_function(self, value_fn):
        """``value_fn(ValueContext)`` once per (local) replica; the results must share structure, shapes and
        dtypes. Returns the results' nest with a ``PerReplica`` (stacked layout) per leaf, as tf.distribute
        regroups them (a single array gives one ``PerReplica``); string leaves stay on the host."""
        import jax

        n = self.num_replicas_in_sync
        results = [value_fn(ValueContext(r, n)) for r in self._local_replica_ids]
        flat = [jax.tree_util.tree_flatten(r) for r in results]
        treedef = flat[0][1]
        for r, (lv, td) in zip(self._local_replica_ids, flat):
            if td != treedef:
                raise ValueError(f"experimental_distribute_values_from_function: replica {r} returned structure "
                                 f"{td}, replica {self._local_replica_ids[0]} returned {treedef}")
        x64 = x64_enabled()
        leaf = jax.tree_util.tree_structure(0)
        out = []
        for j in range(len(flat[0][0])):
            col = [np.asarray(_host_leaf(lv[j])) for lv, _ in flat]
            shapes = {(c.shape, c.dtype) for c in col}
            if len(shapes) > 1:
                raise ValueError("experimental_distribute_values_from_function: the replicas' values differ in "
                                 f"shape or dtype at leaf {j}: {[(c.shape, str(c.dtype)) for c in col]}")
            stack = np.stack(col)
            if stack.dtype == object or stack.dtype.kind in "SU":  # strings: host values
                out.append(PerReplica(leaf, [stack.astype(object)], self, stacked=True, host=True))
                continue
            stack = to_device_dtype(stack, f"experimental_distribute_values_from_function: leaf {j}", x64,
                                    self._warned)
            out.append(PerReplica(leaf, self._per_replica_from_local([stack], stacked=True), self, stacked=True))
        return jax.tree_util.tree_unflatten(treedef, out)

def _host_leaf(x):
    """A value function's leaf as numpy: Python ints/floats as TF converts them (int32 when it fits,
    float32), strings as bytes."""
    if isinstance(x, (bool, int, float, str, bytes)) and not isinstance(x, np.generic):
        from jaxfeed.pipeline import structure as st

        return st.to_array(x)
    return x


def _is_array_like(x) -> bool:
    import jax

    return isinstance(x, (jax.Array, np.ndarray, np.generic, Variable)) or (
        isinstance(x, (int, float, complex)) and not isinstance(x, bool)) or isinstance(x, bool)


def _kind_key(k):
    if k[0] == "pr":
        return ("pr", k[1], k[2], k[3])
    if k[0] == "var":
        return ("var", id(k[1]))
    if k[0] == "static":
        return ("static", type(k[1]).__name__, k[1])
    return k


def _host_reduce(op, vals, axis):
    vals = [np.asarray(v) for v in vals]
    n = len(vals)
    if axis is None:
        shapes = [v.shape for v in vals]
        if len(set(shapes)) > 1:
            raise ValueError(f"reduce(axis=None): the replicas' values have different shapes {shapes}; reduce "
                             "along the batch axis (axis=0) instead")
        acc = np.array(vals[0], copy=True) if n == 1 else ordered_sum(vals)
        if op == ReduceOp.MEAN:
            acc = (acc / n).astype(acc.dtype) if acc.dtype.kind in "fc" else acc // n
        return acc
    rank = vals[0].ndim
    if not -rank <= axis < rank:
        raise ValueError(f"reduce: axis {axis} is out of range for per-replica values of rank {rank}")
    cat = np.concatenate(vals, axis=axis)
    total = cat.shape[axis]
    s = np.sum(cat, axis=axis, dtype=cat.dtype if cat.dtype.kind in "fciu" else None)
    if op == ReduceOp.MEAN:
        s = (s / total).astype(s.dtype) if s.dtype.kind in "fc" else s / total
    return s


class MirroredStrategy(MeshStrategy):
    """Synchronous data parallelism over the local devices (tf.distribute.MirroredStrategy).

    ``num_logical_devices`` (jaxfeed's): group the devices into replicas of that many logical devices
    (a second mesh axis) for the TPU-style ``experimental_*_logical_device*`` annotations."""

    def __init__(self, devices=None, cross_device_ops=None, *, num_logical_devices=1):
        super().__init__()
        devs = resolve_devices(devices)
        self._cross_device_ops = cross_device_ops
        self._setup(devs, devs, num_logical_devices)

    def __repr__(self):
        return f"<MirroredStrategy replicas={self.num_replicas_in_sync} devices={[str(d) for d in self._devices]}>"
