"""Phase 1: merge the graph's ``with_options`` into the effective Options; drop the option nodes."""

from __future__ import annotations

from .. import graph
from ..nodes.with_options import WithOptions
from ..options import Options


def effective_options(root) -> Options:
    """Options attached anywhere in the graph, merged from the sources up: the later one wins."""
    merged = Options()
    for node in graph.walk(root):
        if isinstance(node, WithOptions):
            merged = merged.merge(node.attached_options)
    return merged


def strip_option_nodes(root, options, log):
    def rewrite(node):
        if isinstance(node, WithOptions):
            return node.inputs[0]
        return node

    return graph.transform(root, rewrite)


from .registry import register  # noqa: E402

register("options", "strip_option_nodes", strip_option_nodes)
