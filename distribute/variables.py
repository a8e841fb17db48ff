"""Variables: ``Variable`` (a mutable ``jax.Array`` holder) and ``MirroredVariable`` (one value on every
replica, kept in sync).

``Variable(...)`` inside a strategy's ``scope()`` creates a ``MirroredVariable`` whose value is a replicated
``jax.Array`` (``NamedSharding(mesh, P())``); outside, a plain one-device variable.

Inside ``run``, the compiled function receives every live mirrored variable of the strategy as an input;
reads see the value as of this step (updated by earlier assignments in the same call) and assignments
become outputs that replace the value after the step. An assignment in replica context is combined by the
variable's ``aggregation``: SUM applies the sum over replicas, MEAN the mean, ONLY_FIRST_REPLICA replica 0's
value; NONE requires every replica to assign the same value and raises ``ValueError`` when they differ
(checked on the device; reported at the latest a few steps later, before any host read of the variable).
"""

from __future__ import annotations

import numpy as np

from . import context
from .values import ReduceOp, VariableAggregation, VariableSynchronization

_PENDING_CHECK_EVERY = 8
_NARROWING_REPORTED: set = set()  # variables whose 64-bit initial values were reported narrowed (once each)


class Variable:
    """tf.Variable's surface over a ``jax.Array``."""

    def __new__(cls, *args, **kwargs):
        if cls is Variable:
            strategy, ctx = context.current()
            if strategy is not None and not strategy._is_default:
                sync = kwargs.get("synchronization", args[5] if len(args) > 5 else VariableSynchronization.AUTO)
                if VariableSynchronization(sync) == VariableSynchronization.ON_READ:
                    return super().__new__(SyncOnReadVariable)
                return super().__new__(MirroredVariable)
        return super().__new__(cls)

    def __init__(self, initial_value=None, trainable=None, name=None, dtype=None,
                 aggregation=VariableAggregation.NONE, synchronization=VariableSynchronization.AUTO, shape=None):
        import jax.numpy as jnp

        if initial_value is None:
            raise ValueError("Variable: initial_value must be given")
        if callable(initial_value):
            initial_value = initial_value()
        self._aggregation = VariableAggregation(aggregation)
        self._synchronization = VariableSynchronization(synchronization)
        self.name = name or "Variable"
        self.trainable = True if trainable is None else bool(trainable)
        if dtype is None and isinstance(initial_value, (np.ndarray, np.generic)):  # 64-bit: never narrowed silently
            from .values import to_device_dtype, x64_enabled

            initial_value = to_device_dtype(np.asarray(initial_value), f"Variable {self.name!r}: the initial value",
                                            x64_enabled(), _NARROWING_REPORTED)
        value = jnp.asarray(np.asarray(initial_value) if not hasattr(initial_value, "dtype") else initial_value,
                            dtype=dtype)
        self._dtype, self._shape = value.dtype, tuple(value.shape)
        self._value = self._place(value)

    def _place(self, value):
        return value

    # ------------------------------------------------------------------ facts
    @property
    def dtype(self):
        return self._dtype

    @property
    def shape(self):
        return self._shape

    @property
    def aggregation(self):
        return self._aggregation

    @property
    def synchronization(self):
        return self._synchronization

    # ------------------------------------------------------------------ reading
    def read_value(self):
        return self._value

    def value(self):
        return self.read_value()

    def numpy(self):
        return np.asarray(self.read_value())

    def __jax_array__(self):
        return self.read_value()

    def __array__(self, dtype=None, copy=None):
        arr = self.numpy()
        return arr if dtype is None else arr.astype(dtype)

    # ------------------------------------------------------------------ writing
    def _coerce(self, value, what):
        import jax.numpy as jnp

        if isinstance(value, Variable):
            value = value.read_value()
        value = jnp.asarray(value, dtype=self._dtype)
        if tuple(value.shape) != self._shape:
            raise ValueError(f"{what} on variable {self.name!r}: shape {tuple(value.shape)} does not match the "
                             f"variable's shape {self._shape}")
        return value

    def assign(self, value, use_locking=None, name=None, read_value=True):
        if _in_foreign_trace(self):
            raise RuntimeError(f"Variable {self.name!r} was created outside the strategy's scope and cannot be "
                               "assigned inside strategy.run; create it inside `with strategy.scope():`.")
        self._value = self._place(self._coerce(value, "assign"))
        return self

    def assign_add(self, delta, use_locking=None, name=None, read_value=True):
        return self.assign(self.read_value() + self._coerce(delta, "assign_add"))

    def assign_sub(self, delta, use_locking=None, name=None, read_value=True):
        return self.assign(self.read_value() - self._coerce(delta, "assign_sub"))

    # ------------------------------------------------------------------ arithmetic (reads the value)
    def __add__(self, o): return self.read_value() + _v(o)
    def __radd__(self, o): return _v(o) + self.read_value()
    def __sub__(self, o): return self.read_value() - _v(o)
    def __rsub__(self, o): return _v(o) - self.read_value()
    def __mul__(self, o): return self.read_value() * _v(o)
    def __rmul__(self, o): return _v(o) * self.read_value()
    def __truediv__(self, o): return self.read_value() / _v(o)
    def __rtruediv__(self, o): return _v(o) / self.read_value()
    def __matmul__(self, o): return self.read_value() @ _v(o)
    def __rmatmul__(self, o): return _v(o) @ self.read_value()
    def __neg__(self): return -self.read_value()
    def __pow__(self, o): return self.read_value() ** _v(o)
    def __getitem__(self, i): return self.read_value()[i]

    def __repr__(self):
        try:
            val = np.asarray(self._value) if not _is_tracer(self._value) else "<traced>"
        except Exception:  # noqa: BLE001
            val = "<unavailable>"
        return f"<{type(self).__name__} {self.name!r} shape={self._shape} dtype={self._dtype} value={val}>"


def _v(o):
    return o.read_value() if isinstance(o, Variable) else o


def _is_tracer(x) -> bool:
    import jax

    return isinstance(x, jax.core.Tracer)


def _in_foreign_trace(var) -> bool:
    t = context.trace()
    return t is not None and not (isinstance(var, MirroredVariable) and var._strategy is t.strategy)


class MirroredVariable(Variable):
    """One value on every replica of its strategy; see the module docstring."""

    def __init__(self, initial_value=None, trainable=None, name=None, dtype=None,
                 aggregation=VariableAggregation.NONE, synchronization=VariableSynchronization.AUTO, shape=None):
        strategy, ctx = context.current()
        if strategy is None or strategy._is_default:
            raise RuntimeError("MirroredVariable must be created inside a strategy's scope()")
        if ctx is not None:
            raise RuntimeError("Variables cannot be created inside strategy.run (replica context); create them in "
                               "`with strategy.scope():` before calling run.")
        synchronization = VariableSynchronization(synchronization)
        if synchronization == VariableSynchronization.NONE:
            raise ValueError("`NONE` variable synchronization mode is not supported with tf.distribute strategy. "
                             "Please change the `synchronization` for variable: " + str(name))
        if synchronization == VariableSynchronization.ON_READ and not isinstance(self, SyncOnReadVariable):
            raise ValueError("synchronization=ON_READ variables are SyncOnReadVariable; create them with "
                             "jd.Variable(..., synchronization=ON_READ) inside the scope")
        self._strategy = strategy
        self._pending = []  # device flags of NONE-aggregated assignments not yet checked
        sync = VariableSynchronization.ON_READ if isinstance(self, SyncOnReadVariable) else \
            VariableSynchronization.ON_WRITE
        if sync == VariableSynchronization.ON_READ and trainable is None:
            trainable = False  # tf.distribute: ON_READ variables are non-trainable by default
        super().__init__(initial_value, trainable, name, dtype, aggregation, sync, shape)
        strategy._register_variable(self)

    def _place(self, value):
        return self._strategy._replicate(value)

    # ------------------------------------------------------------------ reading
    def read_value(self):
        t = context.trace()
        if t is not None and t.strategy is self._strategy:
            return t.read(self)
        self._check_pending()
        return self._value

    @property
    def values(self):
        return self._strategy.experimental_local_results(self)

    # ------------------------------------------------------------------ writing
    def _replica_update(self, value, combine):
        """In replica context: aggregate the replicas' values, then ``combine(current, aggregated)``."""
        t = context.trace()
        agg = self._aggregation
        value = self._coerce(value, "assign")
        if agg == VariableAggregation.NONE:
            value, same = self._strategy._agree(value)
            t.flag(self, same)
        elif agg == VariableAggregation.ONLY_FIRST_REPLICA:
            value = self._strategy._first_replica(value)
        else:
            value = self._strategy._all_reduce(ReduceOp.from_variable_aggregation(agg), value)
        t.write(self, self._coerce(combine(t.read(self), value), "assign"))
        return self

    def _in_own_trace(self):
        t = context.trace()
        return t is not None and t.strategy is self._strategy

    def assign(self, value, use_locking=None, name=None, read_value=True):
        if self._in_own_trace():
            return self._replica_update(value, lambda cur, v: v)
        if context.trace() is not None:
            raise RuntimeError(f"MirroredVariable {self.name!r} belongs to {self._strategy!r}; it cannot be assigned "
                               "inside another strategy's run.")
        self._check_pending()
        self._value = self._place(self._coerce(value, "assign"))
        return self

    def assign_add(self, delta, use_locking=None, name=None, read_value=True):
        if self._in_own_trace():
            return self._replica_update(delta, lambda cur, v: cur + v)
        return Variable.assign_add(self, delta)

    def assign_sub(self, delta, use_locking=None, name=None, read_value=True):
        if self._in_own_trace():
            return self._replica_update(delta, lambda cur, v: cur - v)
        return Variable.assign_sub(self, delta)

    # ------------------------------------------------------------------ the NONE-aggregation check
    def _add_pending(self, flag):
        self._pending.append(flag)
        if len(self._pending) >= _PENDING_CHECK_EVERY:
            self._check_pending()

    def _check_pending(self):
        if not self._pending:
            return
        flags, self._pending = self._pending, []
        for f in flags:
            if not bool(np.asarray(f.addressable_data(0))):
                raise ValueError(
                    f"MirroredVariable {self.name!r} has aggregation NONE and was assigned different values on "
                    "different replicas inside strategy.run; its copies would diverge. Reduce the value first "
                    "(get_replica_context().all_reduce) or create the variable with aggregation=SUM, MEAN or "
                    "ONLY_FIRST_REPLICA. (The value of replica 0 was kept.)")


class SyncOnReadVariable(MirroredVariable):
    """``synchronization=ON_READ``: each replica keeps its own value (a stacked ``(replicas, ...)`` array
    sharded over the replicas). In replica context reads and writes touch the replica's own copy, with no
    aggregation; reading in cross-replica context combines the copies with the aggregation (SUM: their sum,
    MEAN: their mean, ONLY_FIRST_REPLICA: replica 0's); assigning there sets every copy (SUM: to value / N, so
    that the sum reads back the value). Non-trainable by default. Typical use: metric accumulators."""

    def _place(self, value):
        local = np.stack([np.asarray(value)] * len(self._strategy._local_replica_ids))
        return self._strategy._per_replica_from_local([local], stacked=True)[0]

    def read_value(self):
        t = context.trace()
        if t is not None and t.strategy is self._strategy:
            if context.current()[1] is None:  # inside merge_call: cross-replica
                raise RuntimeError(f"reading SyncOnReadVariable {self.name!r} inside merge_call is not supported")
            return t.read(self)
        return self._aggregate()

    def _aggregate(self):
        import jax.numpy as jnp

        copies = np.stack(self._copies())
        agg = self._aggregation
        if agg == VariableAggregation.SUM:
            out = copies.sum(axis=0, dtype=copies.dtype)
        elif agg == VariableAggregation.MEAN:
            out = (copies.sum(axis=0, dtype=copies.dtype) / len(copies)).astype(copies.dtype) \
                if copies.dtype.kind in "fc" else copies.sum(axis=0) // len(copies)
        elif agg == VariableAggregation.ONLY_FIRST_REPLICA:
            out = copies[0]
        else:
            raise ValueError(f"SyncOnReadVariable {self.name!r} has aggregation NONE: its per-replica values cannot "
                             "be read in cross-replica context; give it aggregation SUM, MEAN or ONLY_FIRST_REPLICA, "
                             "or use strategy.experimental_local_results(variable)")
        return jnp.asarray(out)

    def _copies(self) -> list:
        full = self._strategy._gather_to_host([self._value])[0]
        return [full[r] for r in range(full.shape[0])]

    @property
    def values(self):
        return self._strategy.experimental_local_results(self)

    def local_values(self) -> tuple:
        import jax

        from .values import PerReplica

        pr = PerReplica(jax.tree_util.tree_structure(0), [self._value], self._strategy, stacked=True)
        return pr.local_values()

    def _replica_update(self, value, combine):
        t = context.trace()
        value = self._coerce(value, "assign")
        t.write(self, self._coerce(combine(t.read(self), value), "assign"))
        return self

    def assign(self, value, use_locking=None, name=None, read_value=True):
        if self._in_own_trace():
            return self._replica_update(value, lambda cur, v: v)
        value = np.asarray(self._coerce(value, "assign"))
        if self._aggregation == VariableAggregation.SUM:
            value = (value / self._strategy.num_replicas_in_sync).astype(value.dtype)
        self._value = self._place(value)
        return self

    def assign_add(self, delta, use_locking=None, name=None, read_value=True):
        if self._in_own_trace():
            return self._replica_update(delta, lambda cur, v: cur + v)
        return self.assign(self.read_value() + self._coerce(delta, "assign_add"))

    def assign_sub(self, delta, use_locking=None, name=None, read_value=True):
        if self._in_own_trace():
            return self._replica_update(delta, lambda cur, v: cur - v)
        return self.assign(self.read_value() - self._coerce(delta, "assign_sub"))


class Trace:
    """What one traced ``run`` call reads and writes (the values are tracers)."""

    def __init__(self, strategy, variables, values):
        self.strategy = strategy
        self._vars = {id(v): v for v in variables}
        self._values = {id(v): x for v, x in zip(variables, values)}
        self.assigned: list = []  # variables in order of first assignment
        self.flags: list = []  # (variable, traced bool) for NONE-aggregated assignments

    def read(self, var):
        if id(var) not in self._values:
            raise RuntimeError(f"MirroredVariable {var.name!r} is not known to this run (created during run?)")
        return self._values[id(var)]

    def write(self, var, value):
        if var not in self.assigned:
            self.assigned.append(var)
        self._values[id(var)] = value

    def flag(self, var, same):
        self.flags.append((var, same))
