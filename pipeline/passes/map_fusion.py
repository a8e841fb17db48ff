"""Optimisation: fuse ``map(f).map(g)`` into one ``map(g . f)`` when nothing observable changes.

Both maps must be sequential, or both parallel with the same settings, and neither may need a per-element
RNG or declare itself stateful; otherwise they stay apart. One stage instead of two halves the per-element
hand-offs.
"""

from __future__ import annotations

from .. import graph
from ..nodes.common import call
from ..nodes.map import Map
from .registry import register


def _fusable(outer, inner) -> bool:
    if not isinstance(outer, Map) or not isinstance(inner, Map):
        return False
    if outer.with_rng or inner.with_rng or outer.stateful or inner.stateful:
        return False
    if outer.executor != inner.executor or outer.vectorized != inner.vectorized:
        return False
    if outer.use_unbounded_threadpool != inner.use_unbounded_threadpool:
        return False
    return (outer.num_parallel_calls, outer.deterministic) == (inner.num_parallel_calls, inner.deterministic)


class Fused:
    """``g(f(x))`` with tf.data's argument unpacking between the two; picklable for process workers."""

    def __init__(self, first, second):
        self.first, self.second = first, second
        self.__qualname__ = self.__name__ = (f"{getattr(second, '__qualname__', 'g')}"
                                             f"∘{getattr(first, '__qualname__', 'f')}")

    def __call__(self, *args):
        from ..structure import normalize

        middle = normalize(self.first(*args))
        return call(self.second, middle)


def map_fusion(root, options, log):
    opt = options.experimental_optimization
    if opt.apply_default_optimizations is False or opt.map_fusion is False:
        return root

    def rewrite(node):
        if isinstance(node, Map) and _fusable(node, node.inputs[0]):
            inner = node.inputs[0]
            # each map_func checks its own declared output_signature; the fused stage promises the outer's
            fused = inner.replace(map_func=Fused(inner.map_func, node.map_func), name=None,
                                  output_signature=node.output_signature)
            log.note(node, f"fused with the map below it ({inner.label()}) into one stage")
            return fused
        return node

    return graph.transform(root, rewrite)


register("optimizations", "map_fusion", map_fusion)
