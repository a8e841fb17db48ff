"""Graph rewrite passes, applied before a graph runs in a fixed, documented order:

1. ``options``       -- merge every ``with_options`` in the graph into the effective Options and drop the
                        option nodes (they do nothing at run time);
2. ``auto_shard``    -- only when a distribution strategy feeds several workers (``jaxfeed.distribute``
                        supplies the pass for the worker at hand);
3. ``determinism``   -- passes registered by ``jaxfeed.determinism`` (they check whether determinism is on);
4. ``optimizations`` -- noop elimination, map fusion, vectorized-map hoisting, map+batch fusion, ...

A pass is ``fn(root, options, log) -> root``: it returns a new graph (nodes are never mutated) and says
what it changed with ``log.note(node, why)``. ``Dataset.explain()`` prints that log.
"""

from __future__ import annotations

from typing import Callable

from ..nodes.base import Node
from ..options import Options

PHASES = ("options", "auto_shard", "determinism", "optimizations")

PassFn = Callable[[Node, Options, "PassLog"], Node]


class PassLog:
    """What the passes changed: ``(pass name, node label, reason)`` entries, in order."""

    def __init__(self):
        self.entries: list[tuple[str, str, str]] = []
        self.current = ""

    def note(self, node: Node, why: str) -> None:
        self.entries.append((self.current, node.label(), why))

    def __iter__(self):
        return iter(self.entries)

    def __len__(self):
        return len(self.entries)

    def __str__(self):
        if not self.entries:
            return "(no rewrites)"
        return "\n".join(f"[{p}] {label}: {why}" for p, label, why in self.entries)


_registry: dict[str, list[tuple[str, PassFn]]] = {phase: [] for phase in PHASES}


def register(phase: str, name: str, fn: PassFn) -> None:
    """Add a pass to a phase (idempotent by name; a later registration replaces an earlier one)."""
    if phase not in _registry:
        raise ValueError(f"unknown pass phase {phase!r}; phases are {PHASES}")
    _registry[phase] = [(n, f) for n, f in _registry[phase] if n != name] + [(name, fn)]


def registered(phase: str) -> list[str]:
    return [name for name, _ in _registry[phase]]


def run_passes(root: Node, options: Options | None = None, log: PassLog | None = None,
               auto_shard: PassFn | None = None) -> tuple[Node, Options, PassLog]:
    """Apply every phase in order; returns the rewritten graph, the effective options and the log."""
    from . import options_pass, debug_mode  # noqa: F401  (built-in passes register themselves on import)
    from . import noop_elimination, map_fusion, vectorized_map, map_batch_fusion  # noqa: F401

    log = log if log is not None else PassLog()
    effective = options_pass.effective_options(root)
    if options is not None:
        effective = effective.merge(options)
    for phase in PHASES:
        passes = list(_registry[phase])
        if phase == "auto_shard" and auto_shard is not None:
            passes.append(("auto_shard", auto_shard))
        for name, fn in passes:
            log.current = name
            root = fn(root, effective, log)
    return root, effective, log
