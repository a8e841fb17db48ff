"""Debug mode (``tf.data.experimental.enable_debug_mode``): every stage runs on the consumer's thread, in
order, so a breakpoint or a ``print`` in a user function sees elements one after another, and a traceback
points at the element being produced. Parallel stages lose ``num_parallel_calls`` (and the process
executor), prefetch stages are removed. It is a global switch, as in TF: set it before iterating; it
costs throughput, never changes elements (order is kept: parallel stages are deterministic by default,
and ``deterministic=False`` only permits reordering)."""

from __future__ import annotations

from .. import graph
from ..nodes.interleave import Interleave
from ..nodes.map import Map
from ..nodes.prefetch import Prefetch

_enabled = False


def enable_debug_mode() -> None:
    global _enabled
    _enabled = True


def disable_debug_mode() -> None:
    global _enabled
    _enabled = False


def is_debug_mode() -> bool:
    return _enabled


def run_serially(root, options, log):
    if not _enabled:
        return root

    def rewrite(node):
        if isinstance(node, Prefetch):
            log.note(node, "removed: debug mode runs every stage on the consumer's thread")
            return node.inputs[0]
        changes = {}
        if node.num_parallel_calls is not None:
            changes["num_parallel_calls"] = None
            if isinstance(node, Interleave) and node.cycle_length in (None, -1):
                changes["cycle_length"] = node.cycle  # interleave's default cycle follows num_parallel_calls
        if isinstance(node, Map) and node.executor is not None:
            changes["executor"] = None
        if not changes:
            return node
        log.note(node, "runs serially: debug mode")
        return node.replace(**changes)

    return graph.transform(root, rewrite)


from .registry import register  # noqa: E402

register("options", "debug_mode", run_serially)
