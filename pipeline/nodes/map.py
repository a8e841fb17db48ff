"""``map``: apply a function to every element, sequentially, on threads, or in worker processes."""

from __future__ import annotations

from .. import graph, random_seed
from .base import Node, ShardWalk
from .common import call, check_parallelism, check_signature, warn_deterministic_without_parallelism
from .signature import Conform, check_signature_structure, spec_from_function, unwrap

EXECUTORS = (None, "thread", "process")


class Map(Node):
    """tf.data's ``map``. Its element spec is ``output_signature`` when given (checked on every result:
    ``nodes/signature.py``), else the structure, dtypes and ranks of the function's result on one sample
    element, every dimension unknown."""

    kind = "Map"
    shard_walk = ShardWalk.DATASET_MAPPER
    keeps_batch_dim = True

    def __init__(self, input_node, map_func, num_parallel_calls=None, deterministic=None, *, vectorized=False,
                 executor=None, with_rng=False, seed=None, stateful=None, output_signature=None,
                 use_unbounded_threadpool=False):
        super().__init__((input_node,))
        check_signature(map_func, input_node, "map", extra_args=1 if with_rng else 0)
        self.output_signature = output_signature
        if output_signature is not None:
            check_signature_structure(output_signature, "map")
            # the iterators (threads, processes, the fused map+batch) run map_func: checking there covers all
            map_func = Conform(map_func, output_signature, f"map({_name(map_func)})")
        self.map_func = map_func
        self.num_parallel_calls = check_parallelism(num_parallel_calls, "map")
        warn_deterministic_without_parallelism(deterministic, num_parallel_calls, "map")
        self.deterministic = None if deterministic is None else bool(deterministic)
        if executor not in EXECUTORS:
            raise ValueError(f"map: executor must be one of {EXECUTORS[1:]}, got {executor!r}")
        self.executor = executor
        # Threads of its own, not capped by Options.threading.private_threadpool_size (engine/pool.py). Not
        # in params(): it changes where the function runs, not what the dataset holds (nor its fingerprint).
        self.use_unbounded_threadpool = bool(use_unbounded_threadpool)
        self.vectorized = bool(vectorized)
        self.with_rng = bool(with_rng)
        self.stateful = stateful
        self.is_random = self.with_rng
        # Seeds are fixed when the node is built (as tf.data does); the identity keeps them stable.
        user_func = unwrap(map_func)
        self.seeds = random_seed.resolve(seed, f"Map:{graph.fingerprint(input_node)}:"
                                               f"{graph.function_identity(user_func) if hasattr(user_func, '__code__') else user_func!r}") \
            if with_rng else None
        self.op_seed = seed

    @property
    def lazy_spec(self):
        return self.output_signature is None  # else the spec comes from running the function once

    def params(self):
        p = {"map_func": unwrap(self.map_func), "num_parallel_calls": self.num_parallel_calls,
             "deterministic": self.deterministic}
        if self.output_signature is not None:
            p["output_signature"] = self.output_signature
        for key in ("vectorized", "with_rng"):
            if getattr(self, key):
                p[key] = True
        if self.executor:
            p["executor"] = self.executor
        if self.with_rng:
            p["seed"] = self.op_seed
        return p

    def functions(self):
        return {"map_func": unwrap(self.map_func)}

    def compute_spec(self):
        if self.output_signature is not None:
            return self.output_signature
        fn = self.map_func
        if self.with_rng:
            rng = random_seed.generator((0, 0))
            fn = _with_extra_arg(self.map_func, rng)
        return spec_from_function(fn, self.inputs[0])

    def cardinality(self):
        return self.inputs[0].cardinality()


def _name(fn) -> str:
    return getattr(fn, "__qualname__", type(fn).__name__)


def _with_extra_arg(fn, extra):
    def call_with(*args):
        return fn(*args, extra)

    return call_with


__all__ = ["Map", "call"]
