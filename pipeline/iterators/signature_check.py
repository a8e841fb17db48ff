"""``SignatureCheck``: every element of the input checked against a declared signature (see
``nodes/signature.py``); the first one that breaks it raises, after the elements before it."""

from __future__ import annotations

from ..nodes.signature import conform
from .base import BlockIterator
from ..engine.blocks import restored_error, saved_error
from ..engine.registry import builds
from ..nodes.signature import SignatureCheck


@builds(SignatureCheck)
class SignatureCheckIterator(BlockIterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        self._position = 0  # elements checked so far
        self._pending: list = []  # the rest of a block after an element that failed (ignore_errors goes on)

    def _next_many(self, n):
        if self._pending:
            block, self._pending = self._pending[:n], self._pending[n:]
        else:
            block = self.input.next_many(n)
        out = []
        signature, where = self.node.signature, self.node.where
        for i, element in enumerate(block):
            try:
                out.append(conform(element, signature, f"{where}, element {self._position}"))
            except Exception as e:  # noqa: BLE001 - raised after the elements before it
                self._position += 1
                self._pending = block[i + 1:] + self._pending
                return self._deliver_before(out, e)
            self._position += 1
        return out

    def children(self):
        return [self.input]

    def get_state(self):
        # 'deferred': the error of an element that broke the signature past the elements the last next_many
        # returned (raised by the next call; 'pending': the rest of its block)
        return {"input": self.input.get_state(), "position": self._position, "pending": list(self._pending),
                "deferred": saved_error(self._deferred)}

    def set_state(self, state):
        self.input.set_state(state["input"])
        self._position = int(state["position"])
        self._pending = list(state["pending"])
        self._deferred = restored_error(state.get("deferred"), "'deferred'")  # (absent from older states)
