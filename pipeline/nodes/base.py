"""The contract of a graph node: plain data that describes one transformation or source.

A node holds its inputs and arguments and nothing that runs. Iterating builds a fresh iterator tree:
``ctx.build(node)`` finds the node's iterator in ``engine/registry.py``, where each iterator module
registers itself for its node classes (``@builds(Shuffle)``); a node module never imports its iterator, so
iterators depend on nodes and never the reverse. Rewrite passes copy nodes with ``with_inputs``/``replace``.
Nodes are never mutated after construction, except for caches of derived facts (the element spec), which
copies drop.

Optional capability, *random access*: a node that knows its length and can fetch elements by index
(``random_access()`` True) implements ``length()`` and ``gather(indices)``. Iterators over such nodes
can work in index space (shuffle, shard, skip, take, repeat move indices, ``batch`` gathers once).
"""

from __future__ import annotations

import copy
from typing import Any, Callable

import numpy as np

from .. import structure
from ..engine import registry

INFINITE = -1
UNKNOWN = -2

_UNSET = object()


class ShardWalk:
    """How auto-shard's FILE policy walks through a node towards the files (``distribute/auto_sharding.py``).

    Declared by each node class as ``shard_walk``; a node that declares nothing is ``OPAQUE``, so a new
    transformation makes FILE refuse (and AUTO fall back to DATA) instead of being sharded wrongly."""

    OPAQUE = "opaque"  # nothing is known of how its output relates to files: FILE stops here
    THROUGH = "through"  # its elements come from inputs[0]'s, in the same files: walk into inputs[0]
    EVERY_INPUT = "every_input"  # zip, concatenate: every input is walked, each must be shardable
    READER = "reader"  # reads the files whose names inputs[0] yields (``reads_files``): shard inputs[0]
    FILE_MAPPER = "file_mapper"  # interleave / flat_map: shard inputs[0] when its function makes a reader
    DATASET_MAPPER = "dataset_mapper"  # a map whose function may return datasets (readers) for a flat_map


class Node:
    kind: str = "Node"  # the tf.data-style name shown in graphs and messages
    is_source: bool = False  # reads external data or Python values; no dataset inputs
    is_random: bool = False  # draws random numbers (needs a seed under determinism)
    reads_files: bool = False  # a file reader (auto-shard FILE looks for these)
    lazy_spec: bool = False  # the element spec needs a call of user code (computed when first asked)

    # ---- what other packages may read of any node (declared here so a new node cannot miss one) ----
    seeds = None  # resolved (global, op) seeds of a random node; None = unseeded (``random_seed.resolve``)
    num_parallel_calls = None  # None: runs its function on the consumer's thread; else a count or AUTOTUNE
    deterministic = None  # the user's order flag for a parallel stage (None: the options decide)
    stateful = None  # the user's declaration about its functions (None: inspect them)
    # ---- capabilities: how passes, auto-shard, checkpoints and distribution treat the node ----
    shard_walk: str = ShardWalk.OPAQUE
    only_reorders: bool = False  # yields exactly its input's elements in another order (shuffle): auto-shard
    #                              moves such a stage of file names below the shard it inserts
    output_stage: bool = False  # a trailing stage that changes no element (prefetch, with_options): DATA's
    #                             shard goes beneath it, so the stage keeps its place at the output
    keeps_batch_dim: bool = False  # each output element is one whole input element with the same leading
    #                                dimension (map, filter, take, shuffle, prefetch, ...): a batch size found
    #                                upstream still holds, and elastic resume can count elements through it

    def __init__(self, inputs=()):
        self.inputs: tuple[Node, ...] = tuple(inputs)
        self._spec = _UNSET
        self.name: str | None = None  # the user's ``name=`` argument, shown in graphs and messages

    # ------------------------------------------------------------------ description
    def params(self) -> dict[str, Any]:
        """The arguments that define this node (printed, fingerprinted); never its inputs."""
        return {}

    def functions(self) -> dict[str, Callable]:
        """User functions this node calls, by role (``map_func``, ``predicate``, ...)."""
        return {}

    @property
    def element_spec(self):
        if self._spec is _UNSET:
            self._spec = self.compute_spec()
        return self._spec

    def compute_spec(self):
        raise NotImplementedError(f"{self.kind} does not define its element_spec")

    def cardinality(self) -> int:
        return UNKNOWN

    def batches_of(self) -> int | None:
        """The static number of input elements this node puts in each batch it yields (batch, padded_batch,
        the fused map+batch), or None for a node that does not batch."""
        return None

    def files(self) -> list | None:
        """The file names it lists or reads, when known statically (list_files, file readers over a fixed
        list), else None: auto-shard's plan and the graph fingerprint read them."""
        return None

    def fingerprint_as(self) -> "Node":
        """The graph whose fingerprint stands for this node's: itself, except for a placeholder that a pass
        expands (auto-shard's ``AutoShard``), which names its expansion, so the states of a graph keep the
        fingerprint they had before the placeholder existed (``graph.fingerprint``)."""
        return self

    def runs_ahead(self) -> bool:
        """Does it pull from its input on a background thread, ahead of the consumer (a prefetch with a
        buffer)? The determinism rewriter removes such stages above a stateful function."""
        return False

    def for_data_sharding(self, keep_balanced: bool) -> "Node":
        """What DATA auto-sharding turns this node into (itself, except for a per-replica rebatch: every worker
        then sees every batch, so the balanced split becomes tf.distribute's legacy one)."""
        return self

    def remote_dataset(self):
        """The dataset that produces this node's elements elsewhere (a tf.data-service source: what its workers
        run), for the determinism checker, which looks across that boundary; None for a local node."""
        return None

    def not_replayable_because(self) -> str | None:
        """Why a second run of this node, by itself, may yield other elements than the first (None: it replays
        exactly, given its inputs). Checkpoints, elastic resume and the determinism rewriter all ask this
        through ``pipeline/reproducibility.py``; parallel order and streaming sources are judged there."""
        if self.is_random and self.seeds is None:
            return "is random and unseeded: each run draws a different order (give it a seed or set a global seed)"
        if self.stateful is True:
            return "calls a function declared stateful=True"
        return None

    def label(self) -> str:
        """``Kind(arg=value, ...)`` for graphs and error messages."""
        args = ", ".join(f"{k}={_short(v)}" for k, v in self.params().items())
        base = f"{self.kind}({args})"
        return f"{base} name={self.name!r}" if self.name else base

    def __repr__(self):
        return self.label()

    # ------------------------------------------------------------------ rewriting
    def with_inputs(self, inputs) -> "Node":
        """A copy of this node reading from ``inputs`` instead."""
        new = copy.copy(self)
        new.inputs = tuple(inputs)
        new._spec = _UNSET
        return new

    def replace(self, **attributes) -> "Node":
        """A copy with some attributes changed (used by passes)."""
        new = copy.copy(self)
        for key, value in attributes.items():
            if not hasattr(new, key):
                raise AttributeError(f"{self.kind} has no attribute {key!r}")
            setattr(new, key, value)
        new._spec = _UNSET
        return new

    # ------------------------------------------------------------------ execution
    def make_iterator(self, ctx):
        """A fresh iterator over this node: the one its iterator module registered for its class
        (``engine/registry.py``). Call ``ctx.build(node)`` rather than this (it adds statistics); register an
        iterator with ``@builds(NodeClass)`` rather than overriding this."""
        return registry.build(self, ctx)

    # ------------------------------------------------------------------ random access (optional)
    def random_access(self) -> bool:
        return False

    def length(self) -> int:
        raise TypeError(f"{self.kind} is not random-access")

    def gather(self, indices: np.ndarray):
        """The elements at ``indices``, batched (every leaf gets a leading dimension)."""
        raise TypeError(f"{self.kind} is not random-access")

    def gather_span(self, start: int, stop: int):
        """``gather`` of the positions ``start .. stop - 1`` (a batch of a plain random-access stream). A node
        that can slice a run without an index array overrides it (ParquetDataset)."""
        return self.gather(np.arange(start, stop, dtype=np.int64))

    def element_at(self, index: int):
        return structure.unstack_rows(self.gather(np.asarray([index], dtype=np.int64)), 1)[0]


def _short(value) -> str:
    if callable(value) and hasattr(value, "__name__"):
        return getattr(value, "__qualname__", value.__name__)
    if isinstance(value, np.ndarray):
        return f"array(shape={value.shape}, dtype={value.dtype})"
    if isinstance(value, Node):
        return value.kind
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def known(n: int) -> bool:
    return n >= 0
