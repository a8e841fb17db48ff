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

How far a worker got is read from its state without knowing any iterator's layout: the shard (or
``ElasticSelect``) iterator says how many elements it ``delivered``, and each tail iterator says how many
of them it still ``held`` (``Iterator.held``) -- a node that neither keeps the batch dimension nor batches
(``Node.keeps_batch_dim``, ``Node.batches_of``), or whose iterator cannot say, is refused.
"""

from __future__ import annotations

import numpy as np

from .. import graph, structure
from ..engine.blocks import Failure
from ..dataset_iterator import build_tree
from ..engine.context import IteratorContext
from ..errors import FailedPreconditionError, InvalidArgumentError
from ..nodes.dataset_class import dataset_class
from ..nodes.elastic_select import ElasticSelect
from ..nodes.shard import Shard
from ..passes import run_passes
from ..passes.options_pass import effective_options
from ..reproducibility import not_reproducible_because
from .compatibility import describe_difference, graph_signature
from .format import deserialize

GLOBAL_STATE_KIND = "jaxfeed.elastic"
GLOBAL_STATE_VERSION = 1


# =============================================================================================== checks
def check_supported(dataset, allow_replay: bool = False) -> None:
    """Raise ``FailedPreconditionError`` naming the first node of ``dataset`` (the global dataset G) that
    makes elastic resume impossible (nondeterminism) or, without ``allow_replay``, costly (a streaming
    source): ``reproducibility.not_reproducible_because``."""
    root = dataset._node
    options = effective_options(root)
    if options.deterministic is False:
        raise FailedPreconditionError("elastic resume needs a deterministic pipeline; Options.deterministic is "
                                      "False.", "elastic")
    for node in graph.walk(root):
        why = not_reproducible_because(node, options, allow_replay)
        if why is not None:
            label = node.label()
            raise FailedPreconditionError(f"elastic resume does not support this pipeline: {label} {why}.", label)


# =============================================================================================== workers
def worker_dataset(dataset, num_workers: int, index: int, global_state: dict | None = None, tail=None,
                   allow_replay: bool = False):
    """The dataset worker ``index`` of ``num_workers`` iterates: the elements of ``tail(G.shard(num_workers,
    index))`` for a fresh job, or its share of what ``global_state`` says remains (elements in G's order).
    ``merge_states`` also reads the states of workers made as ``tail(G.shard(W, i))`` directly (W > 1)."""
    Dataset = dataset_class()
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
            state = deserialize(state)
        ds = worker_dataset(dataset, num_workers, i, previous, tail, allow_replay)
        if previous is None and state.get("fingerprint") != ds.fingerprint():  # made with plain shard?
            shard = dataset.shard(num_workers, i)
            plain = tail(shard) if tail is not None else shard
            if state.get("fingerprint") == plain.fingerprint():
                ds = plain
        if state.get("fingerprint") != ds.fingerprint():
            where = describe_difference(state.get("nodes"), ds._node)
            raise FailedPreconditionError(
                f"elastic.merge_states: the state of worker {i} is not from worker {i} of {num_workers} of this "
                f"pipeline ({where}). Pass the states in worker order, with the tail and the previous global "
                "state the workers were made with.", "elastic")
        iterations.add(int(state.get("iteration", 0)))
        delivered = _delivered(ds, state["root"])
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
            "nodes": graph_signature(dataset._node), "iteration": iterations.pop(),
            "frontier": int(frontier_after), "holes": [int(h) for h in new_holes]}


def remaining_positions(global_state: dict, length: int) -> list[int]:
    """The positions (below ``length``, G's length) that a global state says are still to come, in order."""
    tail = range(int(global_state["frontier"]), length)
    return [h for h in global_state["holes"] if h < length] + list(tail)


def _check_global_state(state, dataset) -> None:
    if not isinstance(state, dict) or state.get("kind") != GLOBAL_STATE_KIND:
        raise InvalidArgumentError("This is not an elastic global state (see elastic.merge_states).", "elastic")
    if state.get("version") != GLOBAL_STATE_VERSION:
        raise InvalidArgumentError(f"Elastic global state has version {state.get('version')!r}; this jaxfeed "
                                   f"reads version {GLOBAL_STATE_VERSION}.", "elastic")
    if state.get("fingerprint") != dataset.fingerprint():
        where = describe_difference(state.get("nodes"), dataset._node)
        raise FailedPreconditionError(f"Elastic global state was saved from a different pipeline ({where}).",
                                      "elastic")


def _delivered(ds, state) -> int:
    """How many of its shard's elements the worker iterating ``ds`` has delivered to its user, by its saved
    root iterator ``state``: the elements the shard passed up, minus what the tail (map, batch, prefetch)
    still holds. The iterators are built (not started) only to ask them."""
    root, options, _ = run_passes(ds._node)
    ctx = IteratorContext(options)
    it = build_tree(root, ctx, {})
    try:
        return _delivered_by(it, state)
    finally:
        it.close()
        ctx.close()


def _delivered_by(it, state) -> int:
    chain = []  # (iterator, its state) from the root down to the shard
    while not isinstance(it.node, (Shard, ElasticSelect)):
        node = it.node
        if not (node.keeps_batch_dim or node.batches_of() is not None) or it.held(state) is None:
            raise FailedPreconditionError(
                f"elastic resume supports map, batch and prefetch after the shard; {node.label()} is there. "
                "Put it inside the global dataset.", node.label())
        chain.append((it, state))
        it, state = it.input, state["input"]  # a one-input stage's input, whose state nests under "input"
    passed = it.delivered(state)
    batches = sum(t.node.batches_of() is not None for t, _ in chain)
    if batches > 1:
        raise FailedPreconditionError("elastic resume supports one batch after the shard.", "elastic")
    held = 0
    weight = _units if batches else None  # walking down from the root: elements above the batch are batches
    for t, s in chain:
        if t.node.batches_of() is not None:
            held += t.held(s)  # its rows: shard elements
            weight = None
        else:
            held += t.held(s, weight)
    return passed - held


def _units(element) -> int:
    """Shard elements in one element above the batch: the rows of a batch (a failure counts as one)."""
    if type(element) is Failure:
        return 1
    return structure.batched_len(element)


__all__ = ["ElasticSelect", "check_supported", "worker_dataset", "worker_iterator", "merge_states",
           "remaining_positions", "GLOBAL_STATE_KIND", "GLOBAL_STATE_VERSION"]
