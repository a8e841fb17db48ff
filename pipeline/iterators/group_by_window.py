"""``group_by_window``: elements gather per key; a full window is reduced to a dataset that is drained
before more input is read; at the end the partial windows are flushed in ascending key order.

The state holds the input's state, the open groups (their elements), the window sizes already asked for,
and for the window being drained its key, its elements and the state of reduce_func's iterator (restoring
calls reduce_func again on the same window).
"""

from __future__ import annotations

from ..errors import in_transformation
from ..nodes.elements import dataset_of_elements
from .base import BlockIterator
from ..engine.registry import builds
from ..nodes.group_by_window import GroupByWindow

READ_BLOCK = 64


@builds(GroupByWindow)
class GroupByWindowIterator(BlockIterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        self._label = node.label()
        self._incoming: list = []  # read from the input, not yet grouped (reversed: pop() is next)
        self._position = 0  # input elements grouped so far (for messages)
        self._groups: dict[int, list] = {}
        self._sizes: dict[int, int] = {}
        self._windows = 0  # windows reduced so far (keys the reduce iterators' epochs)
        self._flush = None  # (key, elements) of the window being drained
        self._out = None  # the iterator of reduce_func's dataset for that window
        self._input_done = False

    # ------------------------------------------------------------------ grouping
    def _next_input(self):
        if not self._incoming and not self._input_done:
            block = self.input.next_many(READ_BLOCK)
            if not block:
                self._input_done = True
            block.reverse()
            self._incoming = block
        return self._incoming.pop() if self._incoming else None

    def _next_window(self):
        """(key, elements) of the next window to reduce, or None at the end."""
        node = self.node
        while True:
            element = self._next_input()
            if element is None:
                break
            position = self._position
            self._position += 1
            try:
                key = node.key_of(element, position)
                if key not in self._sizes:
                    self._sizes[key] = node.size_of(key)
            except Exception as e:  # noqa: BLE001 - user code: keep the type, say where
                raise in_transformation(e, self._label, position)
            group = self._groups.setdefault(key, [])
            group.append(element)
            if len(group) == self._sizes[key]:
                return key, self._groups.pop(key)
        if self._groups:
            key = min(self._groups)
            return key, self._groups.pop(key)
        return None

    def _open(self, key, elements, number):
        try:
            ds = self.node.reduce(key, dataset_of_elements(elements), number)
        except Exception as e:  # noqa: BLE001
            raise in_transformation(e, self._label)
        self._flush = (key, elements)
        self._out = self.ctx.child(iteration=self.ctx.iteration + (number,)).build(ds._node)

    # ------------------------------------------------------------------ output
    def _next_many(self, n):
        while True:
            if self._out is not None:
                got = self._out.next_many(n)
                if got:
                    return got
                self._out.close()
                self._out, self._flush = None, None
            window = self._next_window()
            if window is None:
                return []
            number = self._windows
            self._windows += 1
            self._open(*window, number)

    # ------------------------------------------------------------------ state
    def children(self):
        return [self.input, self._out]

    def get_state(self):
        flush = None
        if self._out is not None:
            key, elements = self._flush
            flush = {"key": key, "elements": list(elements), "out": self._out.get_state()}
        return {"input": self.input.get_state(), "incoming": list(self._incoming), "position": self._position,
                "groups": [[k, list(v)] for k, v in self._groups.items()],
                "sizes": [[k, v] for k, v in self._sizes.items()], "windows": self._windows, "flush": flush,
                "input_done": self._input_done}

    def set_state(self, state):
        self.input.set_state(state["input"])
        self._incoming = list(state["incoming"])
        self._position = int(state["position"])
        self._groups = {int(k): list(v) for k, v in state["groups"]}
        self._sizes = {int(k): int(v) for k, v in state["sizes"]}
        self._windows = int(state["windows"])
        self._input_done = bool(state["input_done"])
        if self._out is not None:
            self._out.close()
            self._out = self._flush = None
        flush = state["flush"]
        if flush is not None:
            self._open(int(flush["key"]), list(flush["elements"]), self._windows - 1)
            self._out.set_state(flush["out"])
