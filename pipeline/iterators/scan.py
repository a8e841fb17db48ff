"""``scan``: the state is threaded through a block of elements in one loop; failures keep their place
(the state is unchanged by an element whose step failed)."""

from __future__ import annotations

from ..errors import in_transformation
from .base import BlockIterator
from ..engine import blocks
from ..engine.blocks import Delivery, Failure
from ..engine.registry import builds
from ..nodes.scan import Scan, check_new_state, leaf_dtypes, step

BLOCK = 256


@builds(Scan)
class ScanIterator(BlockIterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        self._label = node.label()
        self._state = node.initial_state
        self._dtypes = leaf_dtypes(node.initial_state)
        self._position = 0
        self._ready = Delivery()

    def _refill(self, n: int) -> bool:
        block = self.input.next_many(n)
        if not block:
            return False
        fn, label, state = self.node.scan_func, self._label, self._state
        out, failed = [], False
        for i, element in enumerate(block):
            try:
                new_state, output = step(fn, state, element, label)
                check_new_state(self.node.initial_state, self._dtypes, new_state, label)
            except Exception as e:  # noqa: BLE001 - user code; raised in place, the state unchanged
                out.append(Failure(in_transformation(e, label, self._position + i)))
                failed = True
                continue
            state = new_state
            out.append(blocks.taken(output, element))  # a function updating its state in place may return it
        self._state = state
        self._position += len(block)
        self._ready = Delivery(out, failed)
        return True

    def _next_many(self, n):
        if not len(self._ready) and not self._refill(min(n, BLOCK)):
            return []
        return self._ready.take(n)

    def children(self):
        return [self.input]

    def get_state(self):
        return {"input": self.input.get_state(), "state": self._state, "position": self._position,
                "ready": self._ready.remaining()}

    def set_state(self, state):
        self.input.set_state(state["input"])
        self._state = state["state"]
        self._position = int(state["position"])
        self._ready = Delivery.of(state["ready"])
