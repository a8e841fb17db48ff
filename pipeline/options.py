"""``Options``: typed, mergeable settings attached to a dataset with ``with_options``.

As in tf.data, every field starts unset (``None``) and reads back as ``None`` until set; the effective
default is applied where the option is used (``Options.deterministic`` unset means True). Options attached
anywhere in a pipeline merge; on a conflict the later ``with_options`` wins and a warning is logged. Unknown
attributes raise ``AttributeError`` and values of the wrong type raise ``TypeError``.
"""

from __future__ import annotations

import enum
import logging

log = logging.getLogger("jaxfeed")


class AutoShardPolicy(enum.IntEnum):
    OFF = -1
    AUTO = 0
    FILE = 1
    DATA = 2
    HINT = 3


class ExternalStatePolicy(enum.Enum):
    WARN = 0
    IGNORE = 1
    FAIL = 2


class AutotuneAlgorithm(enum.IntEnum):
    DEFAULT = 0
    HILL_CLIMB = 1
    GRADIENT_DESCENT = 2
    MAX_PARALLELISM = 3
    STAGE_BASED = 4


class _OptionGroup:
    """A set of typed fields. Subclasses list ``_fields = {name: (type or tuple of types, doc)}``."""

    _fields: dict = {}
    _defaults: dict = {}  # attributes that read back a default instead of None (tf.data quirk)

    def __init__(self):
        object.__setattr__(self, "_values", {})
        for name, (typ, _) in self._fields.items():
            if isinstance(typ, type) and issubclass(typ, _OptionGroup):
                self._values[name] = typ()

    def __getattr__(self, name):
        fields = type(self)._fields
        if name in fields:
            return self._values.get(name, self._defaults.get(name))
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __setattr__(self, name, value):
        fields = type(self)._fields
        if name not in fields:
            raise AttributeError(f"Cannot set the property {name} on {type(self).__name__}.")
        typ, _ = fields[name]
        if value is not None and not _is_instance(value, typ):
            raise TypeError(f'Property "{name}" must be of type {typ}, got: {value!r} (type: {type(value)}).')
        self._values[name] = value

    def __dir__(self):  # the fields, so ``dir(Options())`` shows what can be set (as tf.data's does)
        return sorted(set(super().__dir__()) | set(type(self)._fields) | set(getattr(type(self), "_aliases", {})))

    def _is_set(self, name) -> bool:
        v = self._values.get(name)
        return v._any_set() if isinstance(v, _OptionGroup) else v is not None

    def _any_set(self) -> bool:
        return any(self._is_set(n) for n in self._fields)

    def _merge_from(self, other: "_OptionGroup", path: str):
        for name in self._fields:
            theirs = other._values.get(name)
            if isinstance(theirs, _OptionGroup):
                self._values[name]._merge_from(theirs, f"{path}{name}.")
            elif theirs is not None:
                mine = self._values.get(name)
                if mine is not None and mine != theirs:
                    log.warning("Changing the value of option %s%s from %r to %r", path, name, mine, theirs)
                self._values[name] = theirs

    def _items(self, path=""):
        for name in self._fields:
            v = self._values.get(name)
            if isinstance(v, _OptionGroup):
                yield from v._items(f"{path}{name}.")
            elif v is not None:
                yield f"{path}{name}", v

    def __eq__(self, other):
        return type(self) is type(other) and dict(self._items()) == dict(other._items())

    def __hash__(self):
        return hash(tuple(sorted((k, repr(v)) for k, v in self._items())))

    def __repr__(self):
        body = ", ".join(f"{k}={v!r}" for k, v in self._items())
        return f"{type(self).__name__}({body})"


def _is_instance(value, typ):
    if typ is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if typ is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, typ)


class AutotuneOptions(_OptionGroup):
    _fields = {
        "enabled": (bool, "Tune AUTOTUNE parallelism and buffer sizes at run time (default True)."),
        "cpu_budget": (int, "Threads AUTOTUNE may use in total (default: the number of CPUs)."),
        "ram_budget": (int, "Bytes AUTOTUNE may hold in buffers (default: half the machine's memory)."),
        "autotune_algorithm": (AutotuneAlgorithm, "No effect: jaxfeed has one tuning algorithm (engine/autotune.py)."),
    }


class DistributeOptions(_OptionGroup):
    _fields = {
        "auto_shard_policy": (AutoShardPolicy, "How distribution shards the dataset across workers."),
        "num_devices": (int, "No effect: jaxfeed.distribute takes the devices from the strategy."),
    }
    _defaults = {"auto_shard_policy": AutoShardPolicy.AUTO}


class OptimizationOptions(_OptionGroup):
    _fields = {
        "apply_default_optimizations": (bool, "Run the default graph rewrites (default True)."),
        "map_fusion": (bool, "Fuse consecutive maps into one (default True)."),
        "map_and_batch_fusion": (bool, "Fuse map followed by batch into one stage (default True)."),
        "map_parallelization": (bool, "No effect: a map without num_parallel_calls always runs on its "
                                      "consumer's thread (tf.data's rewrite to AUTOTUNE is not done)."),
        "noop_elimination": (bool, "Remove take(-1), skip(0), repeat(1), prefetch(0) (default True)."),
        "vectorized_map": (bool, "Move maps declared vectorized=True after the next batch (default True)."),
        "elementwise_vectorization": (bool, "Run a map followed by a batch once per batch when its function is "
                                            "provably elementwise arithmetic on numeric elements (checked in its "
                                            "bytecode; passes/elementwise_proof.py) (default True)."),
        "parallel_batch": (bool, "No effect: batch copies in parallel only with num_parallel_calls."),
        "shuffle_and_repeat_fusion": (bool, "No effect: a tf.data runtime rewrite jaxfeed does not need."),
        "filter_fusion": (bool, "No effect: a tf.data runtime rewrite jaxfeed does not do."),
        "inject_prefetch": (bool, "No effect: jaxfeed adds no prefetch the user did not write."),
    }


class ThreadingOptions(_OptionGroup):
    _fields = {
        "max_intra_op_parallelism": (int, "No effect: user functions are Python; their libraries' own "
                                           "thread settings (OMP_NUM_THREADS, ...) apply."),
        "private_threadpool_size": (int, "The most threads each parallel stage (thread map, interleave, parallel "
                                         "batch) runs its work on, and AUTOTUNE's limit; 0 or unset: no cap. "
                                         "tf.data shares one pool of this size across the pipeline; here each "
                                         "stage has its own (engine/pool.py, thread_cap). "
                                         "map(use_unbounded_threadpool=True) is exempt."),
    }

    def __setattr__(self, name, value):
        if name == "private_threadpool_size" and _is_instance(value, int) and value < 0:
            raise ValueError(f"private_threadpool_size must be >= 0 (0: no cap), got {value}")
        super().__setattr__(name, value)


class ExecutionOptions(_OptionGroup):
    """jaxfeed's own: where parallel ``map`` work runs."""

    _fields = {
        "executor": (str, "'thread' or 'process' for parallel maps (unset: threads, or AUTOTUNE's choice "
                          "for a map with num_parallel_calls=AUTOTUNE and no executor)."),
        "num_workers": (int, "Worker processes for the 'process' executor (default: CPUs)."),
    }


class Options(_OptionGroup):
    _fields = {
        "deterministic": (bool, "Keep element order in parallel stages (default True)."),
        "autotune": (AutotuneOptions, ""),
        "experimental_distribute": (DistributeOptions, ""),
        "experimental_optimization": (OptimizationOptions, ""),
        "threading": (ThreadingOptions, ""),
        "execution": (ExecutionOptions, ""),
        "experimental_external_state_policy": (ExternalStatePolicy, "Saving a pipeline with stateful functions or "
                                               "non-replayable generators: unset or FAIL refuses (tf.data's "
                                               "default), WARN logs and saves, IGNORE saves."),
        "experimental_slack": (bool, "No effect: a tf.data runtime scheduling hint."),
        "experimental_symbolic_checkpoint": (bool, "No effect: a saved state always holds what an exact "
                                                   "resume needs, buffered elements included."),
        "experimental_warm_start": (bool, "Start background stages (prefetch; parallel map, interleave and "
                                          "batch; fused map+batch; process map) when the iterator is created, "
                                          "not at the first next: their first inputs are read then, on the "
                                          "creating thread."),
        "experimental_statistics": (bool, "Record per-node statistics (default False: zero cost)."),
        "experimental_ignore_errors_record": (bool, "Keep a record of what ignore_errors skipped."),
    }

    # tf.data's older spellings of fields
    _aliases = {"experimental_deterministic": "deterministic", "experimental_threading": "threading"}

    def __getattr__(self, name):
        return super().__getattr__(type(self)._aliases.get(name, name))

    def __setattr__(self, name, value):
        super().__setattr__(type(self)._aliases.get(name, name), value)

    def merge(self, other: "Options") -> "Options":
        """A new Options: ``self`` overridden by whatever ``other`` sets."""
        out = Options()
        out._merge_from(self, "")
        out._merge_from(other, "")
        return out


def effective_deterministic(options: Options | None, argument: bool | None) -> bool:
    """The order guarantee a parallel stage gives: its own argument, else the option, else True."""
    if argument is not None:
        return bool(argument)
    if options is not None and options.deterministic is not None:
        return options.deterministic
    return True
