"""Optimisation: fuse ``map(f).batch(b)`` into one ``MapAndBatch`` stage.

The fused stage pulls ``b`` elements, maps them in one block loop and writes the results straight into
the batch's arrays: no per-element hand-off between two iterators, and for a parallel map whole batches
are built on the worker threads. It yields exactly what the plain graph yields, errors included (see
``iterators/map_batch.py``).

Not fused: maps in worker processes (their workers already return stacked blocks), maps with
``deterministic=False`` (the fused stage keeps order), and whatever the options switch off
(``experimental_optimization.map_and_batch_fusion``).
"""

from __future__ import annotations

from .. import graph
from ..nodes.batch import Batch
from ..nodes.map import Map
from ..nodes.map_batch import MapAndBatch
from ..options import effective_deterministic
from .registry import register


def fusable(map_node, options) -> str | None:
    """Why ``map_node`` cannot be fused with a following batch, or None when it can."""
    if not isinstance(map_node, Map):
        return "not a map"
    executor = map_node.executor or options.execution.executor
    if map_node.num_parallel_calls is not None:
        if executor == "process":
            return "runs in worker processes"
        if not effective_deterministic(options, map_node.deterministic):
            return "is not deterministic"
    return None


def map_batch_fusion(root, options, log):
    opt = options.experimental_optimization
    if opt.apply_default_optimizations is False or opt.map_and_batch_fusion is False:
        return root

    def rewrite(node):
        if isinstance(node, Batch) and isinstance(node.inputs[0], Map):
            inner = node.inputs[0]
            if fusable(inner, options) is not None:
                return node  # (an elementwise map is already the vectorized_map pass's: it runs first)
            log.note(node, f"fused with the map below it ({inner.label()}) into one MapAndBatch stage")
            return MapAndBatch(inner, node)
        return node

    return graph.transform(root, rewrite)


register("optimizations", "map_batch_fusion", map_batch_fusion)


def executor_notes(root, options, log):
    """Changes nothing; says which parallel maps AUTOTUNE will choose an executor for when they run (the
    choice needs running code: ``engine/executor_choice.py``), so ``explain()`` shows it."""
    from ..engine import autotune, executor_choice

    if not autotune.enabled(options):
        return root
    for node in graph.walk(root):
        fused = isinstance(node, MapAndBatch)
        m = node.map_node if fused else node
        if not isinstance(m, Map) or not executor_choice.chooses(m, options) or m.stateful:
            continue
        if fused and node.vectorized:
            continue
        log.note(node, "AUTOTUNE chooses its executor when it runs: threads, or worker processes if a probe of "
                       "its first elements finds that its function holds the GIL"
                       + ("; on threads it stays fused, in processes it runs as a process map and a batch"
                          if fused else ""))
    return root


register("optimizations", "executor_choice", executor_notes)
