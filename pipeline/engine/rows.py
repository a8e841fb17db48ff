"""Rows of batches, regrouped without going through single elements (``unbatch``, ``rebatch``, replicas).

A ``RowQueue`` holds pending batch pieces (flattened leaves with a start row). Taking rows slices the
pieces -- views, no copy -- and only a batch that spans pieces costs one ``np.concatenate`` per leaf.

``regroup(batches, sizes)`` is the pure form: the rows of ``batches``, in order, cut into batches of
``sizes[0], sizes[1], ...`` (used in turn). (``jaxfeed.distribute`` does not use this module: its per-replica
split is ``distribute/rebatch.py``.)
"""

from __future__ import annotations

import collections

import numpy as np

from .. import structure
from ..errors import InvalidArgumentError


class RowQueue:
    def __init__(self, what: str = "unbatch"):
        self._what = what  # the transformation, for messages
        self._pieces: collections.deque = collections.deque()  # [template, leaves, start]
        self.rows = 0
        self._empty = None  # a zero-row batch of the input's structure (for rebatch sizes of 0)

    def push(self, batch) -> None:
        leaves = structure.flatten(batch)
        n = _leading_dim(leaves, self._what, batch)
        if self._empty is None:
            self._empty = structure.pack_as(batch, [leaf[:0] for leaf in leaves])
        if n:
            self._pieces.append([batch, leaves, 0])
            self.rows += n

    def push_front(self, batch) -> None:
        """``push``, but these rows come before the pending ones."""
        pieces = list(self._pieces)
        self._pieces.clear()
        self.rows = 0
        self.push(batch)
        self._pieces.extend(pieces)
        self.rows += sum(len(leaves[0]) - start for _, leaves, start in pieces)

    def head(self):
        """The oldest pending piece's structure and its leaves' ``(dtype, row shape)``, for a caller that
        joins several queues' rows (``interleave``); None when empty."""
        if not self._pieces:
            return None
        template, leaves, _ = self._pieces[0]
        return template, [(leaf.dtype, leaf.shape[1:]) for leaf in leaves]

    def front(self):
        """The oldest pending piece, ``[structure, leaves, start]`` (its rows from ``start`` on are pending), or
        None: for a caller that reads rows ahead of taking them (``interleave``'s woven rounds). The same list
        stays at the front until rows are taken from it or another piece is put before it."""
        return self._pieces[0] if self._pieces else None

    def front_rows(self) -> int:
        """Rows pending in the front piece (0 when empty)."""
        if not self._pieces:
            return 0
        _, leaves, start = self._pieces[0]
        return len(leaves[0]) - start

    def drop_front(self, k: int) -> None:
        """Take the next ``k`` rows, all of the front piece (``k`` <= what it has left), without slicing them:
        the caller already holds them (read through ``front``)."""
        self._consume(self._pieces[0], self._pieces[0][2] + k)

    def take_rows(self, k: int) -> list:
        """Up to ``k`` elements (rows), all from the oldest piece; ``[]`` when empty."""
        if not self._pieces:
            return []
        piece = self._pieces[0]
        template, leaves, start = piece
        stop = min(start + k, len(leaves[0]))
        if structure.is_nested(template):
            out = [structure.pack_as(template, [leaf[j] for leaf in leaves]) for j in range(start, stop)]
        else:
            out = list(leaves[0][start:stop])
        self._consume(piece, stop)
        return out

    def take_batch(self, k: int):
        """The next ``k`` rows as one batch (``k`` <= ``rows``; 0 gives an empty batch)."""
        if k == 0:
            if self._empty is None:
                raise ValueError("RowQueue.take_batch(0) before any batch was pushed")
            return self._empty
        template, leaves = self.take_leaves(k)
        return structure.pack_as(template, leaves)

    def take_leaves(self, k: int):
        """The next ``k`` rows (1 <= ``k`` <= ``rows``) as ``(structure, leaves)``: ``take_batch``'s leaves in
        ``flatten`` order, not yet packed (for a caller that joins them further)."""
        self._check_joinable(k)
        parts = []
        need = k
        while need:
            piece = self._pieces[0]
            template, leaves, start = piece
            stop = min(start + need, len(leaves[0]))
            parts.append((template, [leaf[start:stop] for leaf in leaves]))
            need -= stop - start
            self._consume(piece, stop)
        template = parts[0][0]
        if len(parts) == 1:
            return template, parts[0][1]
        columns = zip(*(leaves for _, leaves in parts))
        return template, [self._concatenate(j, col) for j, col in enumerate(columns)]

    def _check_joinable(self, k: int) -> None:
        """The pieces the next ``k`` rows come from must share one structure: their leaves are joined by
        position, so ``{"a": ...}`` rows after ``{"b": ...}`` rows would silently take the first's keys.
        Checked before anything is consumed, so the queue is unchanged when it raises."""
        first, need = self._pieces[0][0], k
        for template, leaves, start in self._pieces:
            if template is not first and not structure.same_structure(first, template):
                raise InvalidArgumentError(
                    f"{self._what}: Cannot join rows of batches with different structures: "
                    f"{structure.describe(template)} after {structure.describe(first)}.", self._what)
            need -= len(leaves[0]) - start
            if need <= 0:
                return

    def _concatenate(self, leaf_index, col):
        try:
            return structure.concatenate(col)
        except ValueError:
            shapes = [list(np.shape(c)[1:]) for c in col]
            bad = next((i for i, s in enumerate(shapes) if s != shapes[0]), None)
            if bad is None:
                raise
            raise InvalidArgumentError(
                f"{self._what}: Cannot add tensor to the batch: number of elements does not match. Shapes are: "
                f"[tensor]: {shapes[bad]}, [batch]: {shapes[0]} (rows of input batches with different shapes, "
                f"leaf {leaf_index})", self._what) from None

    def _consume(self, piece, stop):
        self.rows -= stop - piece[2]
        if stop == len(piece[1][0]):
            self._pieces.popleft()
        else:
            piece[2] = stop

    # ------------------------------------------------------------------ state
    def get_state(self) -> dict:
        """The pending rows (only those not yet taken) and the empty-batch template."""
        pending = [structure.pack_as(t, [leaf[s:] for leaf in leaves]) for t, leaves, s in self._pieces]
        return {"pending": pending, "empty": self._empty}

    def set_state(self, state: dict) -> None:
        self._pieces.clear()
        self.rows = 0
        self._empty = state["empty"]
        for batch in state["pending"]:
            self.push(batch)


def _leading_dim(leaves, what, batch) -> int:
    sizes = []
    for leaf in leaves:
        if np.ndim(leaf) == 0:
            raise InvalidArgumentError(f"{what}: Cannot unbatch an input with scalar components "
                                       f"(input element {structure.describe(batch)} has a scalar leaf).", what)
        sizes.append(len(leaf))
    if any(s != sizes[0] for s in sizes):
        raise InvalidArgumentError(f"{what}: the components of an input batch must have the same leading "
                                   f"dimension, got {sizes}.", what)
    return sizes[0]


def regroup(batches, sizes, drop_remainder: bool = False) -> list:
    """The rows of ``batches`` (structures of arrays, all the same nest) regrouped into batches of
    ``sizes`` rows, used in turn (an int is one size for all). The last batch is partial unless
    ``drop_remainder``; nothing is emitted once the rows run out (not even for a size of 0)."""
    sizes = [sizes] if isinstance(sizes, (int, np.integer)) else list(sizes)
    if not sizes or any(s < 0 for s in sizes) or not any(sizes):
        raise ValueError(f"regroup: sizes must be >= 0 and not all 0, got {sizes}")
    queue = RowQueue("rebatch")
    for batch in batches:
        queue.push(batch)
    out = []
    i = 0
    while queue.rows:
        size = sizes[i]
        i = (i + 1) % len(sizes)
        if queue.rows < size:
            if not drop_remainder:
                out.append(queue.take_batch(queue.rows))
            break
        out.append(queue.take_batch(size))
    return out
