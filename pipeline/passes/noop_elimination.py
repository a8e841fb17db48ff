"""Optimisation: remove nodes that change nothing -- take(-1), skip(0), repeat(1), prefetch(0), shard(1, 0)."""

from __future__ import annotations

from .. import graph
from ..nodes.prefetch import Prefetch
from ..nodes.repeat import Repeat
from ..nodes.shard import Shard
from ..nodes.take import Skip, Take
from .registry import register


def _is_noop(node) -> str | None:
    if isinstance(node, Take) and node.count < 0:
        return "take of a negative count keeps every element"
    if isinstance(node, Skip) and node.count == 0:
        return "skip(0) keeps every element"
    if isinstance(node, Repeat) and node.count == 1:
        return "repeat(1) is the input once"
    if isinstance(node, Prefetch) and node.buffer_size == 0:
        return "prefetch(0) buffers nothing"
    if isinstance(node, Shard) and not node.is_hint and node.num_shards == 1 and not node.require_non_empty:
        return "shard(1, 0) keeps every element"
    return None


def noop_elimination(root, options, log):
    opt = options.experimental_optimization
    if opt.apply_default_optimizations is False or opt.noop_elimination is False:
        return root

    def rewrite(node):
        why = _is_noop(node)
        if why is None:
            return node
        log.note(node, f"removed: {why}")
        return node.inputs[0]

    return graph.transform(root, rewrite)


register("optimizations", "noop_elimination", noop_elimination)
