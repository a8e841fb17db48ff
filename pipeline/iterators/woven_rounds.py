"""Rounds of ``interleave``'s slots woven ahead of the requests, for a ``batch`` that takes stacked rows.

A batch asks the interleave for ``batch_size`` rows at a time (``SlotCycle.next_rows``), while each slot's
columns arrive a read at a time (``READ_AHEAD`` rows): a weave per request moved a quarter of a read per slot
(P6 as ported: 64 rows of each of 4 slots), and its fixed cost -- the checks, one numpy call per leaf and
slot -- came again for every quarter. ``WovenRounds`` weaves every whole round the slots' front pieces hold
in one go and hands it out a request at a time, as views of the woven block.

The slots are not emptied ahead: they keep the woven rows at their fronts, and each hand-out takes its rows
from them (``RowQueue.drop_front``). So every other part of the iterator -- its state, the element way,
the parallel readers' scheduling (by what a slot holds), ``deterministic=False`` -- sees the slots exactly
as if each request had been woven alone. The block stands only while the slots still hold its rows at their
fronts: same cycle position, same slots, no buffered elements before the columns, the same front pieces at
the rows it has handed out so far (``stands``); anything else that touched a slot (an element-way step, a
read of elements that turned the columns into elements, a restore) makes it stand no more, and the next
request weaves afresh.
"""

from __future__ import annotations

import numpy as np

from .. import structure


class WovenRounds:
    __slots__ = ("c", "slots", "pieces", "starts", "template", "leaves", "block", "rounds", "taken")

    def __init__(self, c: int, slots: list, block_length: int, template, layout, rounds: int):
        """Weave ``rounds`` whole rounds of ``slots`` (in cycle order from slot ``c``), all of their front
        pieces (which hold at least ``rounds * block_length`` rows each, of ``template``'s structure and
        ``layout``: checked by the caller)."""
        B, C = block_length, len(slots)
        n = rounds * B
        self.c, self.slots, self.block, self.rounds, self.taken = c, slots, B, rounds, 0
        self.pieces = [slot.columns.front() for slot in slots]
        self.starts = [piece[2] for piece in self.pieces]
        self.template = template
        parts = [[leaf[start:start + n] for leaf in piece[1]] for piece, start in zip(self.pieces, self.starts)]
        self.leaves = weave_leaves(parts, layout, rounds, B)

    def stands(self, c: int, slots: list) -> bool:
        """Whether the slots (the cycle's, at position ``c``) still hold this block's next rows at their fronts."""
        if c != self.c:
            return False
        C = len(slots)
        for i, slot in enumerate(self.slots):
            if slots[(c + i) % C] is not slot or slot.buffer:
                return False
            piece = slot.columns.front()
            if piece is not self.pieces[i] or piece[2] != self.starts[i]:
                return False
        return True

    def take(self, rounds: int):
        """Up to ``rounds`` rounds (at least one is left): ``(rows, count)``, views of the block; the slots give
        up the same rows."""
        rounds = min(rounds, self.rounds - self.taken)
        n = rounds * self.block
        C = len(self.slots)
        for i, slot in enumerate(self.slots):
            slot.columns.drop_front(n)
            self.starts[i] += n
        a = self.taken * self.block * C
        self.taken += rounds
        b = self.taken * self.block * C
        return structure.pack_as(self.template, [leaf[a:b] for leaf in self.leaves]), n * C

    def done(self) -> bool:
        return self.taken == self.rounds


def weave_leaves(parts: list, layout: list, rounds: int, block_length: int) -> list:
    """The slots' rows in the slot model's order, one new array per leaf: ``parts[i]`` is slot ``i``'s leaves
    (in cycle order from the current slot), each ``rounds * block_length`` rows; ``layout`` their
    ``(dtype, row shape)``. One strided copy per leaf and slot."""
    B, C = block_length, len(parts)
    n = rounds * B
    leaves = []
    for j, (dtype, tail) in enumerate(layout):
        out = np.empty((n * C,) + tail, dtype)
        if B == 1:  # slot i's rows go to rows i, i + C, ...
            for i, part in enumerate(parts):
                out[i::C] = part[j]
        else:  # row (r, i, b): round r, slot i, b-th row of the visit
            view = out.reshape((rounds, C * B) + tail)
            for i, part in enumerate(parts):
                view[:, i * B:(i + 1) * B] = part[j].reshape((rounds, B) + tail)
        leaves.append(out)
    return leaves
