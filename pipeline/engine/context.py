"""What every iterator of one iterator tree shares: effective options, the iteration key, the statistics
recorder, the record of skipped errors and the clean-up hooks."""

from __future__ import annotations

import os

from ..options import Options


class IteratorContext:
    def __init__(self, options: Options | None = None, iteration: tuple = (0,), stats=None):
        self.options = options if options is not None else Options()
        # Which epoch of which enclosing repeat this subtree is in: random stages key their generators
        # on it so that every epoch reshuffles, reproducibly, and a restored iterator draws the same.
        self.iteration = tuple(iteration)
        self.stats = stats  # a StatsRecorder when Options.experimental_statistics is on, else None
        self.skipped: list = []  # ignore_errors records: dicts with node, element/file/offset, error
        self._shared = {"closers": [], "fresh_seeds": {}}

    def child(self, iteration: tuple | None = None) -> "IteratorContext":
        """The context for a sub-iterator (a repeat epoch, an interleave input)."""
        new = object.__new__(IteratorContext)
        new.__dict__.update(self.__dict__)
        if iteration is not None:
            new.iteration = tuple(iteration)
        return new

    def build(self, node):
        """Create the iterator for ``node`` in this context (with statistics when they are on): the one
        registered for its class (``engine/registry.py``, through ``Node.make_iterator``)."""
        it = node.make_iterator(self)
        if self.stats is not None:
            it = self.stats.wrap(it)
        return it

    @property
    def cpu_count(self) -> int:
        """CPUs this pipeline may use: ``Options.autotune.cpu_budget``, else the CPUs we may run on."""
        budget = self.options.autotune.cpu_budget
        if budget:
            return budget
        try:
            return len(os.sched_getaffinity(0))
        except AttributeError:  # not on Linux
            return os.cpu_count() or 1

    def fresh_seeds(self, node) -> tuple[int, int]:
        """Entropy seeds for an unseeded random node, drawn once per iterator tree (all its epochs)."""
        from ..random_seed import fresh

        return self._shared["fresh_seeds"].setdefault(id(node), fresh())

    def on_close(self, fn) -> None:
        self._shared["closers"].append(fn)

    def close(self) -> None:
        closers, self._shared["closers"] = self._shared["closers"], []
        for fn in reversed(closers):
            fn()
