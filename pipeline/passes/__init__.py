"""Graph rewrite passes, applied before a graph runs in a fixed, documented order:

1. ``options``       -- merge every ``with_options`` in the graph into the effective Options and drop the
                        option nodes (they do nothing at run time);
2. ``auto_shard``    -- a distributed dataset's worker graph holds an ``AutoShard`` node; the pass
                        ``jaxfeed.distribute`` registers (``distribute/auto_shard_pass.py``) replaces it by
                        that worker's share under the auto-shard policy (other graphs pass unchanged);
3. ``determinism``   -- passes registered by ``jaxfeed.determinism`` (they check whether determinism is on);
4. ``optimizations`` -- noop elimination, map fusion, vectorized-map hoisting, map+batch fusion, ...

A pass is ``fn(root, options, log) -> root``: it returns a new graph (nodes are never mutated) and says
what it changed with ``log.note(node, why)``. ``Dataset.explain()`` prints that log.
"""

from __future__ import annotations

from ..nodes.base import Node
from ..options import Options
from .registry import PHASES, PassFn, PassLog, in_phase, register  # noqa: F401  (the package's face)


def run_passes(root: Node, options: Options | None = None,
               log: PassLog | None = None) -> tuple[Node, Options, PassLog]:
    """Apply every phase in order; returns the rewritten graph, the effective options and the log."""
    from . import options_pass, debug_mode  # noqa: F401  (built-in passes register themselves on import)
    from . import noop_elimination, map_fusion, vectorized_map, map_batch_fusion  # noqa: F401

    log = log if log is not None else PassLog()
    effective = options_pass.effective_options(root)
    if options is not None:
        effective = effective.merge(options)
    for phase in PHASES:
        for name, fn in in_phase(phase):
            log.current = name
            root = fn(root, effective, log)
    return root, effective, log
