"""Phase 1: merge the graph's ``with_options`` into the effective Options; drop the option nodes."""

from __future__ import annotations

from .. import graph
from ..options import Options


def effective_options(root) -> Options:
    """Options attached anywhere in the graph, merged from the sources up: the later one wins."""
    merged = Options()
    for node in graph.walk(root):
        attached = getattr(node, "attached_options", None)
        if attached is not None:
            merged = merged.merge(attached)
    return merged


def strip_option_nodes(root, options, log):
    def rewrite(node):
        if getattr(node, "attached_options", None) is not None:
            return node.inputs[0]
        return node

    return graph.transform(root, rewrite)


from . import register  # noqa: E402

register("options", "strip_option_nodes", strip_option_nodes)
