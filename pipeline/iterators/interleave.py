"""Sequential ``interleave``: tf.data's slot model [reference 3.4], on the consumer's thread.

``cycle`` slots start empty; ``c`` is the current slot and ``b`` counts the elements taken from it in this
visit. At slot ``c``: an open inner iterator gives up to ``block_length - b`` elements (the visit ends
when ``b`` reaches ``block_length``); an exhausted one is closed and the cycle moves on at once; an empty
slot takes the next input element and opens ``map_func(element)`` there without moving on, or -- once the
input is exhausted -- the cycle moves on. A ``map_func`` that raises counts as a slot that opened and
ended at once (the error, then the cycle moves on); an input error leaves the slot empty and the cycle
where it is (the next visit reads the input again), as tf.data does.

State: the input's state, ``c``, ``b`` and, per open slot, the input element and its position (the
inner dataset is rebuilt from them on restore) and the inner iterator's state.
"""

from __future__ import annotations

from .base import Iterator
from .blocks import Failure
from .flat_map import open_inner


class InterleaveIterator(Iterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        self._cycle = node.cycle
        self._block_length = node.block_length
        self._slots: list = [None] * self._cycle  # None or [element, position, inner iterator]
        self._c = 0
        self._b = 0
        self._position = 0  # input elements consumed
        self._input_done = False

    def _advance(self):
        self._b = 0
        self._c = (self._c + 1) % self._cycle

    def _next_many(self, n):
        out: list = []
        slots = self._slots
        try:
            while len(out) < n:
                slot = slots[self._c]
                if slot is None:
                    if self._input_done:
                        if not any(slots):
                            break
                        self._advance()
                        continue
                    try:
                        element = self.input.next()
                    except StopIteration:
                        self._input_done = True
                        continue
                    position = self._position
                    self._position += 1
                    try:
                        inner = open_inner(self.node, self.ctx, element, position, "interleave")
                    except Exception:
                        self._advance()
                        raise
                    slots[self._c] = [element, position, inner]
                    continue
                got = slot[2].next_many(min(n - len(out), self._block_length - self._b))
                if not got:
                    slot[2].close()
                    slots[self._c] = None
                    self._advance()
                    continue
                out.extend(got)
                self._b += len(got)
                if self._b == self._block_length:
                    self._advance()
        except Exception as e:  # noqa: BLE001 - delivered after the elements before it
            if not out:
                raise
            self._deferred = e
        return out

    def _next(self):
        out = self._next_many(1)
        if not out:
            raise StopIteration
        return out[0]

    def children(self):
        return [self.input] + [slot[2] for slot in self._slots if slot is not None]

    def get_state(self):
        slots = [None if s is None else {"element": s[0], "position": s[1], "inner": s[2].get_state()}
                 for s in self._slots]
        return {"input": self.input.get_state(), "c": self._c, "b": self._b, "position": self._position,
                "input_done": self._input_done, "slots": slots,
                "deferred": None if self._deferred is None else Failure(self._deferred)}

    def set_state(self, state):
        for slot in self._slots:
            if slot is not None:
                slot[2].close()
        self.input.set_state(state["input"])
        self._c, self._b = int(state["c"]), int(state["b"])
        self._position = int(state["position"])
        self._input_done = bool(state["input_done"])
        self._deferred = None if state["deferred"] is None else state["deferred"].error
        self._slots = [None] * self._cycle
        for i, saved in enumerate(state["slots"]):
            if saved is not None:
                inner = open_inner(self.node, self.ctx, saved["element"], saved["position"], "interleave")
                inner.set_state(saved["inner"])
                self._slots[i] = [saved["element"], saved["position"], inner]
