"""``flat_map``: one inner iterator at a time, read in blocks.

State: the input's state, the outer element the current inner dataset was made from and that inner
iterator's state. A restore calls ``map_func`` on the saved element again and restores the new inner
iterator, so the function must build the same dataset from the same element.

Under a ``batch`` (directly, or as an interleave's inner dataset) the inner datasets' stacked rows pass
through: ``next_rows`` hands on the current inner iterator's (a ``from_generator`` per file reads its rows as
columns, as it does alone or interleaved), moving to the next inner dataset where one ends.
"""

from __future__ import annotations

from ..errors import in_transformation
from ..nodes.common import call
from ..engine.registry import builds
from ..nodes.dataset_class import dataset_of
from ..nodes.flat_map import FlatMap
from .base import BlockIterator


def inner_dataset(node, element, position: int, transformation: str):
    """Call ``node.map_func`` on ``element``: the node of the dataset it returns; errors are annotated with the
    node and the input element's position."""
    try:
        return dataset_of(call(node.map_func, element), transformation)
    except Exception as e:  # noqa: BLE001 - user code; keeps its type
        raise in_transformation(e, node.label(), position)


def open_inner(node, ctx, element, position: int, transformation: str):
    """The iterator of the dataset ``node.map_func`` returns for ``element`` (``inner_dataset``)."""
    return ctx.build(inner_dataset(node, element, position, transformation))


@builds(FlatMap)
class FlatMapIterator(BlockIterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        self._position = 0  # outer elements consumed
        self._element = None  # the outer element of the current inner iterator
        self._inner = None

    def _open_next(self) -> bool:
        """Open the inner dataset of the next input element; False at the end of the input."""
        try:
            element = self.input.next()  # input errors pass through; the next call goes on
        except StopIteration:
            return False
        position = self._position
        self._position += 1
        self._inner = open_inner(self.node, self.ctx, element, position, "flat_map")
        self._element = element
        return True

    def _close_inner(self):
        self._inner.close()
        self._inner = self._element = None

    def _next_many(self, n):
        while True:
            if self._inner is None and not self._open_next():
                return []
            out = self._inner.next_many(n)
            if out:
                return out
            self._close_inner()

    # A batch above asks ``next_rows`` (whatever the inner datasets turn out to be: one that does not stack
    # rows answers "elements", and the batch takes them by ``next_many``).
    stacks_rows = True

    def next_rows(self, n):
        """The current inner iterator's stacked rows: ``(rows, count)``; ``(None, 0)`` at the end of the input;
        ``(None, -1)`` when the next results are elements (``next_many`` takes them)."""
        if self._deferred is not None:
            self._raise_deferred()
        while True:
            if self._inner is None and not self._open_next():
                return None, 0
            if not getattr(self._inner, "stacks_rows", False):
                return None, -1
            rows, k = self._inner.next_rows(n)
            if k:
                return rows, k
            self._close_inner()  # this inner dataset ended: on to the next one

    def children(self):
        return [self.input, self._inner]

    def get_state(self):
        return {"input": self.input.get_state(), "position": self._position, "element": self._element,
                "inner": None if self._inner is None else self._inner.get_state()}

    def set_state(self, state):
        if self._inner is not None:
            self._inner.close()
            self._inner = self._element = None
        self.input.set_state(state["input"])
        self._position = int(state["position"])
        if state["inner"] is not None:
            self._inner = open_inner(self.node, self.ctx, state["element"], self._position - 1, "flat_map")
            self._inner.set_state(state["inner"])
            self._element = state["element"]
