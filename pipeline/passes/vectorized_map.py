"""Optimisation: a ``map(f, vectorized=True)`` followed by ``batch(b)`` calls ``f`` once per batch.

The user declares ``f`` elementwise along axis 0, so ``f(stack(xs)) == stack([f(x) for x in xs])``; the
rewrite builds a ``MapAndBatch(vectorized=True)`` stage that stacks the inputs and calls ``f`` once. If the
batched call raises, the stage re-runs the batch element by element, so errors surface exactly as in the
plain graph. Maps that need a per-element RNG (``with_rng``) stay per element.
"""

from __future__ import annotations

from .. import graph
from ..nodes.batch import Batch
from ..nodes.map import Map
from .registry import register
from ..nodes.map_batch import MapAndBatch
from .map_batch_fusion import fusable, vectorizable


def vectorized_map(root, options, log):
    opt = options.experimental_optimization
    if opt.apply_default_optimizations is False or opt.vectorized_map is False:
        return root

    def rewrite(node):
        if isinstance(node, Batch) and isinstance(node.inputs[0], Map):
            inner = node.inputs[0]
            if not vectorizable(inner, options) or fusable(inner, options) is not None:
                return node
            log.note(node, f"the map below it ({inner.label()}) is declared vectorized: it runs once per batch")
            return MapAndBatch(inner, node, vectorized=True)
        return node

    return graph.transform(root, rewrite)


register("optimizations", "vectorized_map", vectorized_map)
