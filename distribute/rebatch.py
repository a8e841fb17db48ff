"""The two ways tf.distribute cuts a global batch into per-replica batches, as pipeline nodes (numpy only).

- ``BalancedRebatch(sizes)`` (tf's RebatchDatasetV2): the rows of the incoming batches form one stream that
  is cut into batches of ``sizes[0], sizes[1], ...`` in turn, crossing input batch boundaries. For W workers
  and R replicas per worker, ``balanced_sizes(B, W, R, w)`` gives worker w's list (section 6.1).
- ``LegacyRebatch(n)`` (tf's RebatchDataset): each incoming batch of b rows is cut into n pieces of
  ceil(b / n) rows in order, so the last pieces are short or empty.

They are nodes so that auto-sharding sees them (DATA sharding turns balanced into legacy, as tf does) and so
that the distributed iterator's state is just the pipeline's state.
"""

from __future__ import annotations

import numpy as np

from jaxfeed.pipeline import structure as st
from jaxfeed.pipeline.engine.registry import builds
from jaxfeed.pipeline.iterators.base import Iterator
from jaxfeed.pipeline.nodes.base import UNKNOWN, ShardWalk
from jaxfeed.pipeline.nodes.common import PassThrough


def balanced_sizes(global_batch: int, num_workers: int, replicas_per_worker: int, worker: int) -> list[int]:
    """tf.distribute's ``batch_sizes_for_worker``: N = W*R sub-batches, the first B - N*(B//N) one row
    larger, rotated left by worker*R."""
    n = num_workers * replicas_per_worker
    f, extra = divmod(global_batch, n)
    worker0 = [f + 1] * extra + [f] * (n - extra)
    off = worker * replicas_per_worker
    return worker0[off:] + worker0[:off]


def legacy_sizes(b: int, n: int) -> list[int]:
    """How a batch of ``b`` rows is cut by the legacy split into ``n`` pieces."""
    c = -(-b // n)
    return [max(0, min(c, b - i * c)) for i in range(n)]


def _per_replica_spec(spec):
    return st.map_structure(lambda s: s.unbatched().with_leading(None) if s.shape else s, spec)


class BalancedRebatch(PassThrough):
    kind = "BalancedRebatch"
    shard_walk = ShardWalk.THROUGH

    def __init__(self, input_node, global_batch, num_workers, replicas_per_worker, worker):
        super().__init__((input_node,))
        self.global_batch = int(global_batch)
        self.num_workers, self.replicas_per_worker, self.worker = int(num_workers), int(replicas_per_worker), int(worker)
        self.sizes = balanced_sizes(self.global_batch, self.num_workers, self.replicas_per_worker, self.worker)

    def params(self):
        return {"sizes": self.sizes}

    def compute_spec(self):
        return _per_replica_spec(self.inputs[0].element_spec)

    def cardinality(self):
        return UNKNOWN

    def for_data_sharding(self, keep_balanced: bool):
        """What DATA sharding turns this node into (every worker then sees every batch)."""
        if keep_balanced:
            return BalancedRebatch(self.inputs[0], self.global_batch, self.num_workers, self.replicas_per_worker, 0)
        return LegacyRebatch(self.inputs[0], self.num_workers * self.replicas_per_worker)


class LegacyRebatch(PassThrough):
    kind = "LegacyRebatch"
    shard_walk = ShardWalk.THROUGH

    def __init__(self, input_node, num_replicas):
        super().__init__((input_node,))
        self.num_replicas = int(num_replicas)

    def params(self):
        return {"num_replicas": self.num_replicas}

    def compute_spec(self):
        return _per_replica_spec(self.inputs[0].element_spec)

    def cardinality(self):
        n = self.inputs[0].cardinality()
        return n * self.num_replicas if n >= 0 else n


def _rows(batch, start, stop):
    return st.map_structure(lambda a: a[start:stop], batch)


@builds(BalancedRebatch)
class BalancedRebatchIterator(Iterator):
    """Works on flat lists of leaves (one flatten per input batch, one pack per output)."""

    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        self._sizes = node.sizes
        self._k = 0  # position in the size cycle
        self._pending = None  # leaves of the rows received but not yet emitted
        self._struct = None  # the nest of the input batches (to pack outputs)
        self._done = False

    def _pull(self) -> bool:
        try:
            batch = self.input.next()
        except StopIteration:
            self._done = True
            return False
        leaves = st.flatten(batch)
        if self._struct is None:
            self._struct = batch
        if self._pending is None:
            self._pending = leaves
        else:
            self._pending = [np.concatenate([a, b], axis=0) for a, b in zip(self._pending, leaves)]
        return True

    def _available(self):
        return 0 if self._pending is None else len(self._pending[0])

    def _next(self):
        size = self._sizes[self._k % len(self._sizes)]
        while self._available() < size and not self._done:
            self._pull()
        if self._available() == 0:
            if not self._done:
                self._pull()  # a size of 0: learn whether data remains before emitting an empty batch
            if self._available() == 0:
                raise StopIteration  # no trailing empty batch after the data (tf's quirk, not copied)
        self._k += 1
        take = min(size, self._available())
        pending = self._pending
        out = [a[:take] for a in pending]
        self._pending = [a[take:] for a in pending] if take < len(pending[0]) else None
        return st.pack_as(self._struct, out)

    def children(self):
        return [self.input]

    def get_state(self):
        return {"input": self.input.get_state(), "k": self._k, "done": self._done,
                "pending": None if self._pending is None else list(self._pending),
                "template": None if self._struct is None else [a[:0] for a in st.flatten(self._struct)]}

    def set_state(self, state):
        self.input.set_state(state["input"])
        self._k, self._done = int(state["k"]), bool(state["done"])
        spec = self.node.inputs[0].element_spec
        self._pending = None if state["pending"] is None else [np.asarray(a) for a in state["pending"]]
        self._struct = None if state["template"] is None else st.pack_as(spec, state["template"])


@builds(LegacyRebatch)
class LegacyRebatchIterator(Iterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        self._n = node.num_replicas
        self._batch = None
        self._piece = 0

    def _next(self):
        if self._batch is None:
            self._batch = self.input.next()  # StopIteration ends this iterator too
            self._piece = 0
        b = st.batched_len(self._batch)
        c = -(-b // self._n)
        i = self._piece
        out = _rows(self._batch, min(i * c, b), min((i + 1) * c, b))
        self._piece += 1
        if self._piece == self._n:
            self._batch = None
        return out

    def _next_many(self, k):
        """Up to ``k`` pieces, cut with one flatten per incoming batch (the distributed iterator asks for a
        step's worth at once); the same pieces, in the same order, as ``k`` calls of ``_next``."""
        out = []
        while len(out) < k:
            if self._batch is None:
                try:
                    self._batch = self.input.next()
                except StopIteration:
                    break
                except Exception as e:  # noqa: BLE001 - as the base class: what came before the error first
                    if not out:
                        raise
                    self._deferred = e
                    break
                self._piece = 0
            batch = self._batch
            leaves = st.flatten(batch)
            b = len(leaves[0]) if leaves else 0
            c = -(-b // self._n)
            stop = min(self._n, self._piece + k - len(out))
            for i in range(self._piece, stop):
                lo, hi = min(i * c, b), min((i + 1) * c, b)
                out.append(st.pack_as(batch, [a[lo:hi] for a in leaves]))
            self._piece = stop
            if stop == self._n:
                self._batch = None
        return out

    def children(self):
        return [self.input]

    def get_state(self):
        return {"input": self.input.get_state(), "piece": self._piece,
                "batch": None if self._batch is None else st.flatten(self._batch)}

    def set_state(self, state):
        self.input.set_state(state["input"])
        self._piece = int(state["piece"])
        spec = self.node.inputs[0].element_spec
        self._batch = None if state["batch"] is None else st.pack_as(spec, state["batch"])
