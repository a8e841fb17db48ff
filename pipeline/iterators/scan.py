"""``scan``: the state is threaded through a block of elements in one loop; failures keep their place
(the state is unchanged by an element whose step failed)."""

from __future__ import annotations

import numpy as np

from .. import structure
from ..errors import in_transformation
from .base import BlockIterator
from ..engine.blocks import Delivery, Failure

BLOCK = 256


def _dtype(leaf):
    return structure.STRING if isinstance(leaf, bytes) else getattr(leaf, "dtype", None)


def step(fn, state, element, label: str):
    """``(new_state, output)`` of one call, normalised; TypeError naming ``label`` if it is not a pair.

    The pair is the function's result, so only it is "top level": a list state or output inside it is one
    array, as in tf.data (``scan([0, 1], lambda s, _: ([s[1], s[0] + s[1]], s[0]))`` keeps an int32[2]
    state), while a top-level list pair is a tuple."""
    result = fn(state, element)
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise TypeError(f"{label}: `scan_func` must return a pair (new_state, output), got "
                        f"{type(result).__name__}.")
    return (structure.normalize_inner(result[0], f"new state of {label}"),
            structure.normalize_inner(result[1], f"output of {label}"))


def leaf_dtypes(state) -> list:
    return [_dtype(x) for x in structure.flatten(state)]


def check_new_state(initial, dtypes: list, new_state, label: str) -> None:
    """TypeError unless ``new_state`` has the structure and leaf dtypes (``leaf_dtypes(initial)``) of
    ``initial`` (tf.data's rule for scan and reduce; shapes may change)."""
    if type(new_state) is type(initial) and isinstance(initial, np.generic):
        return  # a numpy scalar's type is its dtype: the common case, checked without walking
    if not structure.same_structure(initial, new_state) or leaf_dtypes(new_state) != dtypes:
        raise TypeError(f"{label}: the new state must keep the initial state's structure and dtypes: initial "
                        f"{structure.spec_of(initial)!r}, new {structure.spec_of(new_state)!r}.")


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
            out.append(output)
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
