"""The contract of a graph node: plain data that describes one transformation or source.

A node holds its inputs and arguments and nothing that runs. Iterating builds a fresh iterator tree
(``make_iterator``); rewrite passes copy nodes with ``with_inputs``/``replace``. Nodes are never mutated
after construction, except for caches of derived facts (the element spec), which copies drop.

Optional capability, *random access*: a node that knows its length and can fetch elements by index
(``random_access()`` True) implements ``length()`` and ``gather(indices)``. Iterators over such nodes
can work in index space (shuffle, shard, skip, take, repeat move indices, ``batch`` gathers once).
"""

from __future__ import annotations

import copy
from typing import Any, Callable

import numpy as np

from .. import structure

INFINITE = -1
UNKNOWN = -2

_UNSET = object()


class Node:
    kind: str = "Node"  # the tf.data-style name shown in graphs and messages
    is_source: bool = False  # reads external data or Python values; no dataset inputs
    is_random: bool = False  # draws random numbers (needs a seed under determinism)
    reads_files: bool = False  # a file reader (auto-shard FILE looks for these)

    def __init__(self, inputs=()):
        self.inputs: tuple[Node, ...] = tuple(inputs)
        self._spec = _UNSET
        self.name: str | None = None  # the user's ``name=`` argument, shown in graphs and messages

    # ------------------------------------------------------------------ description
    def params(self) -> dict[str, Any]:
        """The arguments that define this node (printed, fingerprinted); never its inputs."""
        return {}

    def functions(self) -> dict[str, Callable]:
        """User functions this node calls, by role (``map_func``, ``predicate``, ...)."""
        return {}

    @property
    def element_spec(self):
        if self._spec is _UNSET:
            self._spec = self.compute_spec()
        return self._spec

    def compute_spec(self):
        raise NotImplementedError(f"{self.kind} does not define its element_spec")

    def cardinality(self) -> int:
        return UNKNOWN

    def label(self) -> str:
        """``Kind(arg=value, ...)`` for graphs and error messages."""
        args = ", ".join(f"{k}={_short(v)}" for k, v in self.params().items())
        base = f"{self.kind}({args})"
        return f"{base} name={self.name!r}" if self.name else base

    def __repr__(self):
        return self.label()

    # ------------------------------------------------------------------ rewriting
    def with_inputs(self, inputs) -> "Node":
        """A copy of this node reading from ``inputs`` instead."""
        new = copy.copy(self)
        new.inputs = tuple(inputs)
        new._spec = _UNSET
        return new

    def replace(self, **attributes) -> "Node":
        """A copy with some attributes changed (used by passes)."""
        new = copy.copy(self)
        for key, value in attributes.items():
            if not hasattr(new, key):
                raise AttributeError(f"{self.kind} has no attribute {key!r}")
            setattr(new, key, value)
        new._spec = _UNSET
        return new

    # ------------------------------------------------------------------ execution
    def make_iterator(self, ctx):
        raise NotImplementedError(f"{self.kind} cannot be iterated")

    # ------------------------------------------------------------------ random access (optional)
    def random_access(self) -> bool:
        return False

    def length(self) -> int:
        raise TypeError(f"{self.kind} is not random-access")

    def gather(self, indices: np.ndarray):
        """The elements at ``indices``, batched (every leaf gets a leading dimension)."""
        raise TypeError(f"{self.kind} is not random-access")

    def element_at(self, index: int):
        return structure.unstack_rows(self.gather(np.asarray([index], dtype=np.int64)), 1)[0]


def _short(value) -> str:
    if callable(value) and hasattr(value, "__name__"):
        return getattr(value, "__qualname__", value.__name__)
    if isinstance(value, np.ndarray):
        return f"array(shape={value.shape}, dtype={value.dtype})"
    if isinstance(value, Node):
        return value.kind
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def known(n: int) -> bool:
    return n >= 0
