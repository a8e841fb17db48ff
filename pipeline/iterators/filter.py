"""``filter``, and the predicate-over-blocks machinery ``take_while`` shares.

The predicate runs over a block of input elements in one loop and each verdict is checked to be a scalar
bool. Kept elements and failures (the predicate raised, or returned something other than a bool) go into
a ``Delivery`` in input order, so an error arrives after the elements before it and iteration can go on
after it. Over an index stream (a random-access input) the block is gathered at once and the *indices*
of the kept elements are passed on, so a later ``batch`` still gathers once.
"""

from __future__ import annotations

import itertools

import numpy as np

from .. import structure
from .base import Iterator
from ..engine.blocks import Delivery, Failure, extend_in_place
from ..engine.registry import builds
from ..nodes.filter import Filter

BLOCK = 256


def verdicts(predicate, block: list, label: str, first_position: int) -> tuple[list, bool]:
    """``([verdict per element], any failure)``: a verdict is a bool (Python or numpy) or a ``Failure`` (the
    predicate raised, or returned something other than a scalar bool)."""
    out: list = []
    it = iter(block)
    calls = itertools.starmap if type(block[0]) is tuple else map
    failed = extend_in_place(out, lambda: calls(predicate, it), len(block), label, first_position)
    if not set(map(type, out)) <= _VERDICT_TYPES:
        out = [_checked(v, label, first_position + i) for i, v in enumerate(out)]
        failed = failed or any(type(v) is Failure for v in out)
    return out, failed


_VERDICT_TYPES = {bool, np.bool_, Failure}


def _checked(v, label: str, position: int):
    if type(v) in _VERDICT_TYPES:
        return v
    if type(v) is np.ndarray and v.shape == () and v.dtype == np.bool_:
        return bool(v)
    return Failure(ValueError(f"Invalid `predicate` of {label}: it must return a scalar bool, but returned "
                              f"{_describe(v)} for input element {position}."))


def _describe(value) -> str:
    if isinstance(value, (np.ndarray, np.generic)):
        return f"an array of shape {value.shape} and dtype {value.dtype}"
    return f"a {type(value).__name__} ({value!r:.40})"


class PredicateIterator(Iterator):
    """Runs ``node.predicate`` over blocks; subclasses choose what to keep (``_select``)."""

    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        self.index_source = self.input.index_source
        self._label = node.label()
        self._position = 0  # input elements judged so far
        self._ready = Delivery()
        self._stopped = False  # take_while met its first False

    def _select(self, items: list, verdict: list, failed: bool) -> list:
        """The items to deliver (failures in place) for these verdicts."""
        raise NotImplementedError

    def _pull(self, n: int) -> bool:
        """Judge input blocks until some item is ready; False at the end."""
        while not self._stopped:
            if self.index_source is not None:
                idx = self.input.next_indices(n)
                if not len(idx):
                    return False
                items = idx.tolist()
                block = structure.unstack_rows(self.index_source.gather(idx), len(items))
            else:
                block = items = self.input.next_many(n)
                if not block:
                    return False
            verdict, failed = verdicts(self.node.predicate, block, self._label, self._position)
            self._position += len(block)
            kept = self._select(items, verdict, failed)
            if kept:
                self._ready = Delivery(kept, failed)
                return True
            n = min(2 * n, BLOCK)  # a selective predicate: read on in bigger blocks
        return False

    def _take(self, n: int) -> list:
        # whole blocks even when fewer are asked for (a batch asks for what it still lacks); one at a time
        # only for one-at-a-time consumers
        if not len(self._ready) and not self._pull(BLOCK if n > 1 else 1):
            return []
        return self._ready.take(n)

    def _next(self):
        if self.index_source is not None:
            return super()._next()
        out = self._take(1)
        if not out:
            raise StopIteration
        return out[0]

    def _next_many(self, n):
        if self.index_source is not None:
            return super()._next_many(n)
        return self._take(n)

    def next_indices(self, n):
        return np.asarray(self._take(n), dtype=np.int64)

    def children(self):
        return [self.input]

    def get_state(self):
        return {"input": self.input.get_state(), "position": self._position, "ready": self._ready.remaining(),
                "stopped": self._stopped}

    def set_state(self, state):
        self.input.set_state(state["input"])
        self._position = int(state["position"])
        self._ready = Delivery.of(state["ready"])
        self._stopped = bool(state["stopped"])


@builds(Filter)
class FilterIterator(PredicateIterator):
    def _select(self, items, verdict, failed):
        if not failed:
            return list(itertools.compress(items, verdict))
        return [v if type(v) is Failure else x for x, v in zip(items, verdict) if type(v) is Failure or v]
