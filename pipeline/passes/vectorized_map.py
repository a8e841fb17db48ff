"""Optimisation: a ``map(f)`` followed by ``batch(b)`` calls ``f`` once per batch when ``f`` is elementwise.

Elementwise means ``f(stack(xs)) == stack([f(x) for x in xs])``: declared by the user (``vectorized=True``)
or proven from ``f``'s bytecode and the input's element spec (``elementwise_proof.py``: the plain
arithmetic of a ported ``map(lambda x: x + 1)``). The rewrite builds a ``MapAndBatch(vectorized=True)``
stage that stacks the inputs and calls ``f`` once. If the batched call raises, the stage re-runs the batch
element by element, so errors surface exactly as in the plain graph. Maps that need a per-element RNG
(``with_rng``) or declare themselves stateful stay per element.
"""

from __future__ import annotations

from .. import graph
from ..nodes.batch import Batch
from ..nodes.map import Map
from ..nodes.signature import Conform
from ..structure import TensorSpec
from .registry import register
from ..nodes.map_batch import MapAndBatch
from .elementwise_proof import Leaf, NotProven, prove_elementwise
from .map_batch_fusion import fusable
from .map_fusion import Fused


def vectorized_map(root, options, log):
    opt = options.experimental_optimization
    if opt.apply_default_optimizations is False:
        return root

    def rewrite(node):
        if not (isinstance(node, Batch) and isinstance(node.inputs[0], Map)):
            return node
        inner = node.inputs[0]
        if fusable(inner, options) is not None:
            return node
        if inner.vectorized and not inner.with_rng and opt.vectorized_map is not False:
            log.note(node, f"the map below it ({inner.label()}) is declared vectorized: it runs once per batch")
            return MapAndBatch(inner, node, vectorized=True)
        if opt.elementwise_vectorization is False or opt.map_and_batch_fusion is False:
            return node  # (a proven map's batch is a fusion of the two: switched off with map_and_batch_fusion)
        try:
            result = proven_elementwise(inner)
        except NotProven as why:
            if not inner.vectorized:
                log.note(node, f"the map below it ({inner.label()}) runs per element: not provably elementwise "
                               f"({why})")
            return node
        log.note(node, f"the map below it ({inner.label()}) is provably elementwise arithmetic (result "
                       f"{_describe(result)}): it runs once per batch")
        return MapAndBatch(inner, node, vectorized=True, proven=True)

    return graph.transform(root, rewrite)


def proven_elementwise(map_node):
    """The Leaf structure of ``map_node``'s result when its function is provably elementwise on its input's
    element spec; raises NotProven with the reason otherwise."""
    if map_node.with_rng or map_node.stateful:
        raise NotProven("it takes a per-element generator or is declared stateful")
    spec_node = map_node.inputs[0]
    if spec_node.lazy_spec:
        raise NotProven("its input's element spec is known only by running user code")
    spec = spec_node.element_spec
    specs = spec if type(spec) is tuple else (spec,)
    if not all(type(s) is TensorSpec for s in specs):
        raise NotProven("its input is not a leaf or a plain tuple of leaves")
    return _prove(map_node.map_func, tuple(Leaf(s.dtype, s.rank) for s in specs))


def _prove(fn, args):
    if isinstance(fn, Conform):
        raise NotProven("it declares an output_signature")
    if isinstance(fn, Fused):  # g(f(x)) with tf.data's unpacking between: prove f, then g on f's result
        middle = _prove(fn.first, args)
        return _prove(fn.second, middle if type(middle) is tuple else (middle,))
    return prove_elementwise(fn, args)


def _describe(result) -> str:
    if type(result) is tuple:
        return "(" + ", ".join(map(_describe, result)) + ")"
    return f"{result.dtype}, rank {result.rank}"


register("optimizations", "vectorized_map", vectorized_map)
