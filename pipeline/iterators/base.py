"""The contract of an iterator: a small class with explicit state that executes one node.

- ``next()`` returns the next element or raises ``StopIteration``; once exhausted it keeps raising.
- ``next_many(n)`` returns a list of 1..n elements, or ``[]`` at the end. Per-element work belongs in such
  a block loop: it is how elements move between stages without per-element call overhead. Fewer than
  ``n`` elements do *not* mean the end; only ``[]`` does. An error met in the middle of a block is raised
  by the *next* call, after the elements before it have been returned.
- The base class owns ``next``/``next_many`` (they deliver a deferred error first); subclasses implement
  ``_next`` and, for block work, ``_next_many`` (a ``BlockIterator`` implements ``_next_many`` alone).
- ``get_state()`` returns a small dict (positions, counters, RNG states; buffered elements only where they
  must be), ``set_state(state)`` restores it into a fresh iterator of the same node. An iterator that may
  keep an error for its next call (``_deferred``) saves it too -- key ``deferred``, ``blocks.saved_error`` /
  ``restored_error`` -- or its consumer takes it (``take_deferred``): never dropped by a save. Child states nest
  under their own keys. Background work (threads, processes) starts at the first ``next``, so creating an
  iterator and restoring a state is cheap -- unless ``Options.experimental_warm_start`` asks for it at
  creation: then the root iterator calls ``start_ahead()`` on every stage, inputs first.
- ``close()`` releases threads, processes and files; it is idempotent and closes the children.

Index streams: an iterator whose elements are the elements of a random-access node at some indices sets
``index_source`` to that node and implements ``next_indices(n)`` (an int64 array, empty at the end).
Downstream stages (batch) can then gather a whole batch with one vectorised index.
"""

from __future__ import annotations

import sys

import numpy as np

from .. import structure
from ..errors import FailedPreconditionError


class Iterator:
    index_source = None  # the random-access node this iterator streams indices into, if any
    _deferred = None  # an error met in the middle of a block, raised by the next call

    def __init__(self, node, ctx):
        self.node = node
        self.ctx = ctx

    # ------------------------------------------------------------------ public protocol
    def next(self):
        if self._deferred is not None:
            self._raise_deferred()
        return self._next()

    def next_many(self, n: int) -> list:
        if self._deferred is not None:
            self._raise_deferred()
        return self._next_many(n)

    def _raise_deferred(self):
        error, self._deferred = self._deferred, None
        raise error

    def take_deferred(self):
        """The error this iterator met after the elements its last ``next_many`` returned (kept for its next
        call), taken now; None when there is none. A caller that keeps those elements and may let a state be
        saved before it calls again (a prefetch buffering them, an interleave slot, the user's ``next_many``)
        takes it and keeps it with them, in place -- not every iterator's own state holds it."""
        error, self._deferred = self._deferred, None
        return error

    def defer(self, error) -> None:
        """Raise ``error`` at the next call (a restored state's deferred error: see ``DatasetIterator``)."""
        self._deferred = error

    def _deliver_before(self, out, error):
        """``out``, the elements (or indices) made before ``error``: returned now, ``error`` kept for the next
        call (an iterator that does this saves it in its state: see the module docstring); ``error`` raised now
        when ``out`` is empty."""
        if not len(out):
            raise error
        self._deferred = error
        return out

    # ------------------------------------------------------------------ subclass hooks
    def _next(self):
        if self.index_source is not None:
            idx = self.next_indices(1)
            if len(idx) == 0:
                raise StopIteration
            return self.index_source.element_at(int(idx[0]))
        raise NotImplementedError(f"{type(self).__name__}.next")

    def _next_many(self, n: int) -> list:
        if self.index_source is not None:
            idx = self.next_indices(n)
            if len(idx) == 0:
                return []
            return structure.unstack_rows(self.index_source.gather(idx), len(idx))
        out = []
        nxt = self._next
        try:
            for _ in range(n):
                out.append(nxt())
        except StopIteration:
            pass
        except Exception as e:  # noqa: BLE001
            return self._deliver_before(out, e)  # what came before the error first
        return out

    def next_indices(self, n: int) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} does not stream indices")

    # ------------------------------------------------------------------ state
    def get_state(self) -> dict:
        raise FailedPreconditionError(f"{self.node.kind} iterators cannot save their state", self.node.kind)

    def set_state(self, state: dict) -> None:
        raise FailedPreconditionError(f"{self.node.kind} iterators cannot restore state", self.node.kind)

    @staticmethod
    def held(state: dict, weight=None) -> int | None:
        """How many of its input's elements a saved ``state`` of this iterator holds that its consumer has
        not received (read from the input, not yet passed on; its input's state answers for the input), or
        None where this iterator cannot say. ``weight(element)``, when given, counts each held input element
        as that many elements further upstream (elastic resume: above a batch, an element is a whole batch).
        Iterators that buffer elements (map, batch, prefetch) override it; elastic resume refuses others."""
        return None

    # ------------------------------------------------------------------ lifetime
    def start_ahead(self) -> None:
        """Start this stage's background work now rather than at the first ``next``
        (``Options.experimental_warm_start``). Stages with no background work have nothing to start."""

    def judge_consumer(self, on: bool = True) -> None:
        """This iterator is the pipeline's output stage, read by the user's loop (``DatasetIterator``): a stage
        whose thread only pays when that loop works between calls serves on demand while it does not
        (prefetch: ``engine/overlap.py``). ``on=False`` undoes it. Other stages have nothing to judge."""

    def children(self) -> list["Iterator"]:
        return []

    def close(self) -> None:
        for child in self.children():
            if child is not None:
                child.close()


def finalizing() -> bool:
    """True while the interpreter finalizes (an iterator freed then: one kept alive by a reference cycle).

    Every thread but the finalizing one is then stopped for good the next time it wants the GIL -- possibly
    while holding a lock (a pool's, a future's, a buffer's). So ``close`` must then take no lock and wait for
    no thread: it would wait forever, and those threads will never run again anyway."""
    return sys.is_finalizing()


class BlockIterator(Iterator):
    """An iterator whose work is done a block at a time in ``_next_many``; ``_next`` is a block of one."""

    def _next(self):
        out = self._next_many(1)
        if not out:
            raise StopIteration
        return out[0]


def count_held(items: list, weight=None) -> int:
    """``Iterator.held`` of buffered input elements (or results made one per input element)."""
    return len(items) if weight is None else sum(map(weight, items))


def take_exactly(it: Iterator, n: int) -> list:
    """Up to ``n`` elements, fewer only at the end of the input."""
    out = it.next_many(n)
    if not out:
        return out
    while len(out) < n:
        more = it.next_many(n - len(out))
        if not more:
            break
        out.extend(more)
    return out


def indices_exactly(it: Iterator, n: int) -> np.ndarray:
    """Up to ``n`` indices from an index stream, fewer only at the end."""
    idx = it.next_indices(n)
    if len(idx) == n or len(idx) == 0:
        return idx
    parts = [idx]
    got = len(idx)
    while got < n:
        more = it.next_indices(n - got)
        if len(more) == 0:
            break
        parts.append(more)
        got += len(more)
    return np.concatenate(parts)
