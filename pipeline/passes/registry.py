"""What a rewrite pass is and where it is registered: the phases in their order, the pass signature, the log
of what the passes changed. Pass modules import this (not the package, whose ``run_passes`` imports them).
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
# The documented order within a phase, whatever order the pass modules happen to be imported in (one pass
# module importing another registers that one first): maps fuse before a batch takes them, and a batch takes
# an elementwise map whole (vectorized_map) before the per-element map+batch fusion is considered.
_ORDER = {"optimizations": ("noop_elimination", "map_fusion", "vectorized_map", "map_batch_fusion",
                            "executor_choice")}


def register(phase: str, name: str, fn: PassFn) -> None:
    """Add a pass to a phase (idempotent by name; a later registration replaces an earlier one)."""
    if phase not in _registry:
        raise ValueError(f"unknown pass phase {phase!r}; phases are {PHASES}")
    _registry[phase] = [(n, f) for n, f in _registry[phase] if n != name] + [(name, fn)]


def in_phase(phase: str) -> list[tuple[str, PassFn]]:
    """The ``(name, pass)`` pairs registered in ``phase``, in the order they run: the documented ones in
    ``_ORDER``, then the others in the order they were registered."""
    order = _ORDER.get(phase, ())
    return sorted(_registry[phase], key=lambda entry: order.index(entry[0]) if entry[0] in order else len(order))
