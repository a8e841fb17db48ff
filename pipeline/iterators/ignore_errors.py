"""``ignore_errors``: pass blocks through; an error raised by the input is recorded and skipped.

Inputs deliver an error met in the middle of a block *after* the elements before it and go on after it
(``blocks.Delivery``, the base class's deferred error), so skipping means calling the input again.

An error that says the input itself is broken -- not one element -- is not skipped but raised: a process
map whose worker died raises ``WorkerDiedError`` at every call from then on, and skipping it would call the
input again forever.
"""

from __future__ import annotations

import logging

from ..errors import WorkerDiedError
from .base import Iterator
from ..engine.registry import builds
from ..nodes.ignore_errors import IgnoreErrors

log = logging.getLogger("jaxfeed")

NOT_SKIPPED = (WorkerDiedError,)  # errors of the input as a whole: the iteration ends with them


def recoverable(error: BaseException) -> bool:
    """Whether ``error`` concerns one element (skip it) rather than the input as a whole (raise it); a
    non-recoverable error wrapped by a stage above (``raise ... from``) is still one."""
    seen = 0
    while error is not None and seen < 16:
        if isinstance(error, NOT_SKIPPED):
            return False
        error, seen = error.__cause__, seen + 1
    return True


@builds(IgnoreErrors)
class IgnoreErrorsIterator(Iterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        self._label = node.label()
        self._position = 0  # input positions consumed: elements delivered plus errors skipped
        self._record = ctx.options.experimental_ignore_errors_record is not False

    def _skip(self, error: Exception) -> None:
        entry = {"node": self._label, "error": f"{type(error).__name__}: {error}", "position": self._position}
        for attribute in ("filename", "offset"):
            value = getattr(error, attribute, None)
            if value is not None:
                entry[attribute] = value
        self._position += 1
        if self._record:
            self.ctx.skipped.append(entry)
        if self.node.log_warning:
            log.warning("%s: skipped input element %d: %s", self._label, entry["position"], entry["error"])

    def _next_many(self, n):
        while True:
            try:
                out = self.input.next_many(n)
            except Exception as e:  # noqa: BLE001 - skipping errors is this node's job
                if not recoverable(e):
                    raise
                self._skip(e)
                continue
            self._position += len(out)
            return out

    def _next(self):
        while True:
            try:
                element = self.input.next()
            except StopIteration:
                raise
            except Exception as e:  # noqa: BLE001
                if not recoverable(e):
                    raise
                self._skip(e)
                continue
            self._position += 1
            return element

    def children(self):
        return [self.input]

    def get_state(self):
        return {"input": self.input.get_state(), "position": self._position}

    def set_state(self, state):
        self.input.set_state(state["input"])
        self._position = int(state["position"])
