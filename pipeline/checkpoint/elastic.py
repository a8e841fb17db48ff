"""Elastic resume: a state saved by W workers, restored by W' workers, continuing with exactly the
elements not yet consumed globally.

The model. A data-parallel job reads one global dataset G; worker i of W reads ``G.shard(W, i)`` (tf.data's
DATA sharding), optionally followed by a per-worker *tail* of ``map``, ``batch`` and ``prefetch``. When G
is deterministic, its output is a fixed sequence and every element has a *position* in it. A worker's
saved state says how far its shard went and how many elements its tail still holds undelivered, so the
set of positions consumed globally is known exactly. ``merge_states`` turns the W worker states into a
*global state*: ``frontier`` M (every position >= M is unconsumed) and ``holes`` (the unconsumed positions
below M, a short list: the lag between the slowest and fastest worker). The remaining sequence is
``holes + [M, M+1, ...]``, in G's order; new worker j of W' takes ``remaining[j::W']``
(``worker_dataset``), so the W' workers together yield each remaining element exactly once, each worker in
G's order. A job restarted from that point can be resumed elastically again (pass the global state it
started from as ``previous`` to ``merge_states``).

Which pipelines are supported (``check_supported`` refuses the others, naming the node):
- G must be deterministic: no unseeded random transformation, no ``from_generator``, no function declared
  ``stateful=True`` or found stateful by ``jaxfeed.determinism``'s inspection (global RNGs, captured
  mutable state, I/O, clocks), no parallel stage with ``deterministic=False``. Seeded shuffles (also
  ``reshuffle_each_iteration``, keyed on the saved iteration), seeded ``map(with_rng=True)``,
  ``filter``/``flat_map``/``interleave`` with pure functions, batch, window, take/skip/repeat are all fine:
  positions are counted in G's *output*, so what happens inside G does not matter -- a ``filter`` with a
  pure predicate keeps the same elements in the same order in every run, so its output positions are as
  well-defined as a range's.
- G's sources must be random-access (range, from_tensor_slices, from_tensors): a new worker skips the
  positions that are not its own, and over an index stream (random-access source followed by
  take/skip/shard/shuffle/repeat) skipping costs index arithmetic, not element reads. Streaming sources
  (file readers) are exact too but re-read everything before a worker's first position; pass
  ``allow_replay=True`` to accept that cost.
- The tail after the shard may hold ``map`` (any kind), one ``batch`` (or the fused map-and-batch) and
  ``prefetch``. A batch is one
  unit of its elements: a partially assembled batch is not consumed.

Cost: like DATA sharding, every worker iterates G and keeps its share; a restored worker first skips the
consumed prefix (cheap over index streams, a replay otherwise).
"""

from __future__ import annotations

import itertools

import numpy as np

from . import graph, structure
from .errors import FailedPreconditionError, InvalidArgumentError
from .iterators.base import Iterator
from .nodes.common import PassThrough

GLOBAL_STATE_KIND = "jaxfeed.elastic"
GLOBAL_STATE_VERSION = 1
_TAIL_KINDS = ("Map", "Batch", "MapAndBatch", "Prefetch")
_BATCH_KINDS = ("Batch", "MapAndBatch")
_BLOCK = 4096


# =============================================================================================== the node
class ElasticSelect(PassThrough):
    """The elements of its input at positions ``remaining[index::num_workers]`` where
    ``remaining = holes + [frontier, frontier + 1, ...]`` (``shard`` is the case holes=[], frontier=0)."""

    kind = "ElasticSelect"
    keeps_batch_dim = True

    def __init__(self, input_node, holes, frontier: int, num_workers: int, index: int):
        super().__init__((input_node,))
        self.holes = np.asarray(sorted(int(h) for h in holes), dtype=np.int64)
        self.frontier = int(frontier)
        self.num_workers = int(num_workers)
        self.index = int(index)
        if self.num_workers <= 0 or not 0 <= self.index < self.num_workers:
            raise InvalidArgumentError(f"elastic: worker index {index} is not in [0, {num_workers}).", self.kind)
        if len(self.holes) and self.holes[-1] >= self.frontier:
            raise InvalidArgumentError("elastic: holes must lie below the frontier.", self.kind)
        # this worker's own holes, and where its share of the tail starts
        self.my_holes = self.holes[self.index::self.num_workers]
        self.tail_offset = (self.index - len(self.holes)) % self.num_workers

    def params(self):
        return {"holes": self.holes, "frontier": self.frontier, "num_workers": self.num_workers,
                "index": self.index}

    def cardinality(self):
        n = self.inputs[0].cardinality()
        if n < 0:  # INFINITE stays infinite (the tail is unbounded); UNKNOWN stays unknown
            return n
        return self.count_selected_below(n)

    def count_selected_below(self, pos: int) -> int:
        """How many of this worker's positions lie below ``pos``."""
        holes = int(np.searchsorted(self.my_holes, pos))
        first_tail = self.frontier + self.tail_offset
        tail = 0 if pos <= first_tail else -(-(pos - first_tail) // self.num_workers)
        return holes + tail

    def nth_position(self, k: int) -> int:
        """The position of this worker's k-th element (0-based)."""
        if k < len(self.my_holes):
            return int(self.my_holes[k])
        return self.frontier + self.tail_offset + (k - len(self.my_holes)) * self.num_workers

    def selected(self, positions: np.ndarray) -> np.ndarray:
        tail = positions - (self.frontier + self.tail_offset)
        mask = (tail >= 0) & (tail % self.num_workers == 0)
        if len(self.my_holes):
            mask |= np.isin(positions, self.my_holes)
        return mask

    def make_iterator(self, ctx):
        return ElasticSelectIterator(self, ctx)


class ElasticSelectIterator(Iterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        self.index_source = self.input.index_source
        self._pos = 0  # input positions consumed so far
        hole_set = set(node.my_holes.tolist())
        start, step = node.frontier + node.tail_offset, node.num_workers
        self._keep = lambda p: p in hole_set or (p >= start and (p - start) % step == 0)

    def _next(self):
        keep = self._keep
        while True:
            element = self.input.next()
            pos = self._pos
            self._pos = pos + 1
            if keep(pos):
                return element

    def _next_many(self, k):
        if self.index_source is not None:
            return super()._next_many(k)
        node = self.node
        while True:
            # never read past the k-th next kept position: the input is consumed as element by element
            last = node.nth_position(node.count_selected_below(self._pos) + k - 1)
            block = self.input.next_many(min(last - self._pos + 1, _BLOCK * node.num_workers))
            if not block:
                return []
            keep = node.selected(np.arange(self._pos, self._pos + len(block), dtype=np.int64))
            self._pos += len(block)
            kept = list(itertools.compress(block, keep.tolist()))
            if kept:
                return kept

    def next_indices(self, k):
        node = self.node
        parts, got = [], 0
        while got < k:
            # exactly enough input positions to reach the (k - got)-th next kept one: never past it
            last = node.nth_position(node.count_selected_below(self._pos) + k - got - 1)
            block = self.input.next_indices(min(last - self._pos + 1, _BLOCK * node.num_workers))
            if len(block) == 0:
                break
            positions = np.arange(self._pos, self._pos + len(block), dtype=np.int64)
            kept = block[node.selected(positions)]
            self._pos += len(block)
            parts.append(kept)
            got += len(kept)
        return np.concatenate(parts) if parts else np.empty(0, np.int64)

    def children(self):
        return [self.input]

    def get_state(self):
        return {"input": self.input.get_state(), "pos": self._pos}

    def set_state(self, state):
        self.input.set_state(state["input"])
        self._pos = int(state["pos"])


# =============================================================================================== checks
def check_supported(dataset, allow_replay: bool = False) -> None:
    """Raise ``FailedPreconditionError`` naming the first node of ``dataset`` (the global dataset G) that
    makes elastic resume impossible (nondeterminism) or, without ``allow_replay``, costly (a streaming
    source)."""
    from .options import effective_deterministic
    from .passes.options_pass import effective_options

    root = dataset._node
    options = effective_options(root)
    if options.deterministic is False:
        raise FailedPreconditionError("elastic resume needs a deterministic pipeline; Options.deterministic is "
                                      "False.", "elastic")
    for node in graph.walk(root):
        label = node.label()
        why = None
        if node.is_random and getattr(node, "seeds", None) is None:
            why = "is random and unseeded: each run draws a different order (give it a seed or set a global seed)"
        elif node.kind == "Generator" and not getattr(node, "replayable", False):
            why = ("runs a Python generator, whose output cannot be known to be the same in every run (declare "
                   "from_generator(..., replayable=True) if it is)")
        elif getattr(node, "stateful", None) is True:
            why = "calls a function declared stateful=True"
        elif (getattr(node, "num_parallel_calls", None) is not None
              and not effective_deterministic(options, getattr(node, "deterministic", None))):
            why = "is a parallel stage with deterministic=False: its output order varies between runs"
        elif node.is_source and not node.random_access() and not node.inputs and not allow_replay:
            why = ("is a streaming source: a restored worker would re-read every element before its first "
                   "position (pass allow_replay=True to accept that)")
        elif node.reads_files and not allow_replay:
            why = ("reads files as a stream: a restored worker would re-read every element before its first "
                   "position (pass allow_replay=True to accept that)")
        if why is None and getattr(node, "stateful", None) is not False:
            why = _hidden_state(node)
        if why is not None:
            raise FailedPreconditionError(f"elastic resume does not support this pipeline: {label} {why}.", label)


def _hidden_state(node) -> str | None:
    """Why a node's functions look stateful to ``jaxfeed.determinism``'s inspection, if they do."""
    try:
        from jaxfeed.determinism.inspection import analyse
    except ImportError:  # pragma: no cover - the determinism package is part of jaxfeed
        return None
    for role, fn in node.functions().items():
        report = analyse(fn)
        if report.stateful or report.unimplemented:
            found = report.reason() or "; ".join(str(f) for f in report.unimplemented[:3])
            return (f"has a {role} that is not a pure function ({found}); declare stateful=False if it is one "
                    "after all")
    return None


# =============================================================================================== workers
def worker_dataset(dataset, num_workers: int, index: int, global_state: dict | None = None, tail=None,
                   allow_replay: bool = False):
    """The dataset worker ``index`` of ``num_workers`` iterates: the elements of ``tail(G.shard(num_workers,
    index))`` for a fresh job, or its share of what ``global_state`` says remains (elements in G's order).
    ``merge_states`` also reads the states of workers made as ``tail(G.shard(W, i))`` directly (W > 1)."""
    from .dataset import Dataset

    check_supported(dataset, allow_replay)
    if global_state is None:
        # shard(W, i) as ElasticSelect: the same elements, and never removed by noop elimination (W=1)
        shard = Dataset(ElasticSelect(dataset._node, [], 0, num_workers, index))
        iteration = 0
    else:
        _check_global_state(global_state, dataset)
        shard = Dataset(ElasticSelect(dataset._node, global_state["holes"], global_state["frontier"],
                                      num_workers, index))
        iteration = int(global_state["iteration"])
    out = tail(shard) if tail is not None else shard
    if not isinstance(out, Dataset):
        raise TypeError(f"elastic: tail must return a Dataset, got {type(out).__name__}")
    out._iterations = iteration  # the epoch key of the saved job: reshuffling shuffles draw the same order
    return out


def worker_iterator(dataset, num_workers: int, index: int, global_state: dict | None = None, tail=None,
                    allow_replay: bool = False):
    return iter(worker_dataset(dataset, num_workers, index, global_state, tail, allow_replay))


def merge_states(states: list, dataset, tail=None, previous: dict | None = None,
                 allow_replay: bool = False) -> dict:
    """The global state of a job whose worker i (of ``len(states)``) saved ``states[i]``.

    The workers must have been made by ``worker_dataset(dataset, len(states), i, previous, tail)`` (for a
    fresh job, ``tail(dataset.shard(W, i))`` works too); each state is checked against that pipeline."""
    from . import checkpoint
    from .passes import run_passes

    check_supported(dataset, allow_replay)
    num_workers = len(states)
    if num_workers == 0:
        raise InvalidArgumentError("elastic.merge_states: no worker states given.", "elastic")
    if previous is not None:
        _check_global_state(previous, dataset)
    holes = np.asarray(previous["holes"] if previous else [], dtype=np.int64)
    frontier = int(previous["frontier"]) if previous else 0
    consumed_holes, frontier_after, iterations = [], frontier, set()
    unconsumed_tail = []
    for i, state in enumerate(states):
        if isinstance(state, (bytes, bytearray, memoryview)):
            state = checkpoint.deserialize(state)
        ds = worker_dataset(dataset, num_workers, i, previous, tail, allow_replay)
        if previous is None and state.get("fingerprint") != ds.fingerprint():  # made with plain shard?
            shard = dataset.shard(num_workers, i)
            plain = tail(shard) if tail is not None else shard
            if state.get("fingerprint") == plain.fingerprint():
                ds = plain
        if state.get("fingerprint") != ds.fingerprint():
            where = checkpoint.describe_difference(state.get("nodes"), ds._node)
            raise FailedPreconditionError(
                f"elastic.merge_states: the state of worker {i} is not from worker {i} of {num_workers} of this "
                f"pipeline ({where}). Pass the states in worker order, with the tail and the previous global "
                "state the workers were made with.", "elastic")
        iterations.add(int(state.get("iteration", 0)))
        root, _, _ = run_passes(ds._node)
        delivered = _delivered(root, state["root"], i, num_workers)
        select = ElasticSelect(dataset._node, holes, frontier, num_workers, i)
        mine = select.my_holes
        consumed_holes.extend(mine[:delivered].tolist())
        in_tail = max(0, delivered - len(mine))
        start = frontier + select.tail_offset
        if in_tail:
            frontier_after = max(frontier_after, start + (in_tail - 1) * num_workers + 1)
        unconsumed_tail.append((start + in_tail * num_workers, num_workers))
    if len(iterations) > 1:
        raise FailedPreconditionError(f"elastic.merge_states: the workers were in different epochs of the "
                                      f"dataset (iteration keys {sorted(iterations)}).", "elastic")
    left = np.setdiff1d(holes, np.asarray(consumed_holes, dtype=np.int64))
    gaps = [np.arange(first, frontier_after, step, dtype=np.int64) for first, step in unconsumed_tail]
    new_holes = np.union1d(left, np.concatenate(gaps) if gaps else np.empty(0, np.int64))
    return {"kind": GLOBAL_STATE_KIND, "version": GLOBAL_STATE_VERSION, "fingerprint": dataset.fingerprint(),
            "nodes": checkpoint.graph_signature(dataset._node), "iteration": iterations.pop(),
            "frontier": int(frontier_after), "holes": [int(h) for h in new_holes]}


def remaining_positions(global_state: dict, length: int) -> list[int]:
    """The positions (below ``length``, G's length) that a global state says are still to come, in order."""
    tail = range(int(global_state["frontier"]), length)
    return [h for h in global_state["holes"] if h < length] + list(tail)


def _check_global_state(state, dataset) -> None:
    from .checkpoint import describe_difference

    if not isinstance(state, dict) or state.get("kind") != GLOBAL_STATE_KIND:
        raise InvalidArgumentError("This is not an elastic global state (see elastic.merge_states).", "elastic")
    if state.get("version") != GLOBAL_STATE_VERSION:
        raise InvalidArgumentError(f"Elastic global state has version {state.get('version')!r}; this jaxfeed "
                                   f"reads version {GLOBAL_STATE_VERSION}.", "elastic")
    if state.get("fingerprint") != dataset.fingerprint():
        where = describe_difference(state.get("nodes"), dataset._node)
        raise FailedPreconditionError(f"Elastic global state was saved from a different pipeline ({where}).",
                                      "elastic")


def _delivered(root, state, worker: int, num_workers: int) -> int:
    """How many of its shard's elements worker ``worker`` has delivered to its user: the elements the shard
    passed up, minus what the tail (map, batch, prefetch) still holds."""
    node, chain = root, []
    while node.kind not in ("Shard", "ElasticSelect"):
        if node.kind not in _TAIL_KINDS:
            raise FailedPreconditionError(
                f"elastic resume supports map, batch and prefetch after the shard; {node.label()} is there. "
                "Put it inside the global dataset.", node.label())
        chain.append((node, state))
        node, state = node.inputs[0], state["input"]
    if node.kind == "Shard":
        pos = int(state["pos"])
        passed = max(0, -(-(pos - worker) // num_workers))
    else:
        passed = node.count_selected_below(int(state["pos"]))
    held = 0
    batches = sum(n.kind in _BATCH_KINDS for n, _ in chain)
    if batches > 1:
        raise FailedPreconditionError("elastic resume supports one batch after the shard.", "elastic")
    above = True  # walking down from the root: elements held above the batch are whole batches
    for n, s in chain:
        if n.kind == "Batch":  # finished batches not yet delivered
            held += sum(_units(b) for b in s["pending"])
            above = False
        elif n.kind == "MapAndBatch":  # mapped rows not yet in a delivered batch
            held += len(s["carry"])
            above = False
        else:
            items = s["buffer"] if n.kind == "Prefetch" else s["ready"]
            held += sum(_units(x) for x in items) if (above and batches) else len(items)
    return passed - held


def _units(batch) -> int:
    """Shard elements in one batch (a failure counts as one)."""
    if type(batch).__name__ == "Failure":
        return 1
    return structure.batched_len(batch)


__all__ = ["ElasticSelect", "check_supported", "worker_dataset", "worker_iterator", "merge_states",
           "remaining_positions", "GLOBAL_STATE_KIND"]
