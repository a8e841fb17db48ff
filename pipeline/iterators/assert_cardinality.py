"""``assert_cardinality``: counts what passes and raises where the count breaks the assertion -- after the
last asserted element when there are more, at the end when there are fewer."""

from __future__ import annotations

from ..errors import FailedPreconditionError
from ..engine.registry import builds
from ..nodes.assert_cardinality import AssertCardinality, element_count
from ..nodes.base import INFINITE
from .base import Iterator


@builds(AssertCardinality)
class AssertCardinalityIterator(Iterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        self._seen = 0

    def _next(self):
        out = self._next_many(1)
        if not out:
            raise StopIteration
        return out[0]

    def _next_many(self, n):
        expected = self.node.expected
        try:
            out = self.input.next_many(n)
        except StopIteration:  # pragma: no cover - next_many signals the end with []
            out = []
        if not out:
            if expected != INFINITE and self._seen != expected or expected == INFINITE:
                raise self._error("only", self._seen)
            return out
        if expected != INFINITE and self._seen + len(out) > expected:
            keep = expected - self._seen
            self._seen = expected + 1
            if keep <= 0:
                raise self._error("at least", self._seen)
            self._deferred = self._error("at least", self._seen)
            return out[:keep]
        self._seen += len(out)
        return out

    def _error(self, how: str, count: int):
        return FailedPreconditionError(f"Input dataset was expected to contain {element_count(self.node.expected)} "
                                       f"but contained {how} {element_count(count)}.", "assert_cardinality")

    def children(self):
        return [self.input]

    def get_state(self):
        return {"input": self.input.get_state(), "seen": self._seen}

    def set_state(self, state):
        self.input.set_state(state["input"])
        self._seen = int(state["seen"])
