"""``interleave``: tf.data's slot model [docs/tf-behaviour.md#interleave], shared by the sequential and parallel iterators.

``cycle`` slots start empty; ``c`` is the current slot and ``b`` counts the elements taken from it in this
visit. At slot ``c``: an open inner iterator gives up to ``block_length - b`` elements (the visit ends
when ``b`` reaches ``block_length``); an exhausted one is closed and the cycle moves on at once; an empty
slot takes the next input element and opens ``map_func(element)`` there without moving on, or -- once the
input is exhausted -- the cycle moves on. A ``map_func`` that raises counts as a slot that opened and
ended at once (the error, then the cycle moves on); an input error leaves the slot empty and the cycle
where it is (the next visit reads the input again); an inner iterator's error takes its place without
counting in the block.

Each slot reads its inner iterator ahead in blocks into a buffer (elements and ``Failure``s in order).
When every slot holds at least ``block_length`` elements per round, whole rounds are woven with list
slicing instead of element by element. The sequential iterator reads a slot when the cycle reaches it and
its buffer is empty; the parallel one (``parallel_interleave.py``) has worker threads read ahead.

Under a ``batch`` (which asks ``next_rows``: the engine's stacked-rows hand-off, ``engine/blocks.py``) a slot
reads an inner iterator that can hand out stacked rows (``from_generator``) as such, ``READ_ROWS`` rows a read:
its ``columns`` (a ``rows.RowQueue``) hold them, ahead of ``buffer``. ``next_rows`` weaves whole rounds of
columns -- one strided copy per leaf and slot -- in exactly the order the slot model gives; every whole round
the slots' front pieces hold is woven at once and handed out a request at a time while the slots still hold
those rows (``woven_rounds.py``); anything else (a visit begun, a slot empty, short or holding elements or
failures, a request under one round) goes element by element, and a slot's next rows become elements
(``Slot.as_elements``: as many as the element-wise step takes) before it looks at the buffer; a slot's
buffered elements come before its columns.

State: the input's state, ``c``, ``b`` and, per slot, the input element and its position (the inner
dataset is rebuilt from them on restore), the inner iterator's state and the buffered elements (at most
about two reads per slot, three in the parallel iterator; a read is ``READ_AHEAD`` elements or ``READ_ROWS``
stacked rows, fewer when they are large: about ``READ_BYTES``). Rows woven ahead are still the slots' rows
until handed out, so they are in the state as any other buffered rows.
"""

from __future__ import annotations

import contextlib
import operator

from .. import structure
from .base import Iterator
from ..engine.blocks import Failure, restored_error, saved_error
from ..engine.rows import RowQueue
from .batch import stack_fast
from .flat_map import open_inner
from .woven_rounds import WovenRounds, weave_leaves

READ_AHEAD = 256  # elements per read of an inner iterator (at least block_length)
READ_ROWS = 1024  # ...and rows per read of one that hands out stacked rows (columns: no Python object per
# row to hold; a read's fixed costs -- the generator's block conversion, the hand-off to the consumer, a weave
# (``woven_rounds.py``) -- then come once per 1024 rows: P6 as ported, CPU per row ~15% lower than at 256)
READ_BYTES = 1 << 18  # ...but only about this many bytes per read (large elements)
FIRST_READ = 8  # until the first read shows how large elements are


class Rows:
    """A read that came stacked: ``rows`` (one array per leaf) holding ``count`` rows."""

    __slots__ = ("rows", "count")

    def __init__(self, rows, count):
        self.rows = rows
        self.count = count

    def first_leaves(self) -> list:
        """The first row's leaves, as its element's would be (for ``_adapt``)."""
        return [leaf[0] for leaf in structure.flatten(self.rows)]


def open_slot(node, ctx, element, position: int):
    """A slot's inner iterator, in this process."""
    return open_inner(node, ctx, element, position, "interleave")


def read_block(iterator, size: int, stacked: bool):
    """One read of an open inner ``iterator``: ``(items, ended)`` as ``Slot.read`` gives them (errors raise).
    Also what a worker process runs for a slot whose inner iterator lives there (``engine/inner_worker.py``)."""
    if stacked and getattr(iterator, "stacks_rows", False):
        rows, k = iterator.next_rows(size)
        if k > 0:
            return Rows(rows, k), False
        block = iterator.next_many(size) if k < 0 else []
    else:
        block = iterator.next_many(size)
    if block:
        # an error the inner iterator met past these elements (kept for its next call) goes in after them:
        # the slot's saved state holds its buffer, not what its inner iterator keeps for the next call
        error = iterator.take_deferred()
        return (block if error is None else block + [Failure(error)]), False
    return [], True


class Slot:
    """One inner dataset: made from the input element at ``position``, read ahead into ``buffer`` (elements
    and failures) and ``columns`` (stacked rows, when the consumer takes them), the buffer first."""

    __slots__ = ("element", "position", "iterator", "restore", "buffer", "failures", "ended", "busy",
                 "input_error", "columns")

    def __init__(self, element, position):
        self.element = element
        self.position = position
        self.iterator = None  # opened by the first read
        self.restore = None  # the inner state to restore when it opens (after set_state)
        self.buffer: list = []  # elements and Failures, in order
        self.failures = 0  # Failures in the buffer
        self.ended = False  # nothing more will come: exhausted, or failed to open
        self.busy = False  # (parallel) a read task is queued or running
        self.input_error = None  # (parallel) this slot stands for an error of the input, in its place
        self.columns = RowQueue("interleave")  # stacked rows read ahead, after ``buffer``

    def held(self) -> int:
        """Rows and elements read ahead (failures count as one)."""
        return self.columns.rows + len(self.buffer)

    def read(self, node, ctx, size: int, stacked: bool = False, opener=None):
        """One read, outside any lock: ``(items, ended)``, items a list or (``stacked``: when the inner
        iterator hands out stacked rows) a ``Rows``; opens the inner iterator first if needed (``opener(node,
        ctx, element, position)``: the parallel iterator's, which may open it in a worker process)."""
        try:
            if self.iterator is None:
                self._open(node, ctx, opener or open_slot)
            if getattr(self.iterator, "remote", False):  # the read runs where the inner iterator lives
                items, ended = self.iterator.read(size, stacked)
            else:
                items, ended = read_block(self.iterator, size, stacked)
        except KeyboardInterrupt:  # a Ctrl-C raised inside a step (the forced second: engine.interrupts) is the
            raise  # user's, now -- not a read error kept in the slot's place
        except BaseException as e:  # noqa: BLE001 - delivered in place; never leave a consumer waiting
            return [Failure(e)], self.iterator is None  # a slot that failed to open ends after its error
        if ended:
            self.close()
        return items, ended

    def open_ahead(self, node, ctx, opener) -> None:
        """Open the inner iterator now, before the first read (a slot opened in a worker process asks its
        first reads there); an error opening it goes in place, as ``read`` would put it."""
        if self.iterator is not None or self.ended:
            return
        try:
            self._open(node, ctx, opener)
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # noqa: BLE001 - delivered in place; never leave a consumer waiting
            self.add([Failure(e)], self.iterator is None)

    def _open(self, node, ctx, opener) -> None:
        self.iterator = opener(node, ctx, self.element, self.position)
        if self.restore is not None:
            self.iterator.set_state(self.restore)
            self.restore = None

    def add(self, items, ended: bool) -> None:
        if type(items) is Rows:
            self.columns.push(items.rows)  # after the buffered elements, if any
        else:
            if items:
                self.as_elements()  # elements come after every row read before them
            self.buffer.extend(items)
            if items and type(items[0]) is Failure:  # a read's failure: its only item, or (a deferred error) its last
                self.failures += 1
            if len(items) > 1 and type(items[-1]) is Failure:
                self.failures += 1
        self.ended = ended

    def as_elements(self, need=None) -> None:
        """At least ``need`` (default: all) of the slot's rows and elements in ``buffer``, for a step that
        takes elements: the columns' next rows become elements after the buffered ones (only as many as
        needed: a batch may go back to taking columns)."""
        queue = self.columns
        if queue.rows and (need is None or len(self.buffer) < need):
            k = queue.rows if need is None else min(queue.rows, need - len(self.buffer))
            self.buffer.extend(structure.unstack_rows(queue.take_batch(k), k))

    def stack_buffer(self) -> bool:
        """The buffered elements (no failures among them) as stacked rows at the head of ``columns`` -- what
        a batch of them would be (``batch.stack_fast``) -- for a step that takes columns; False when they do
        not stack. (A slot's elements come before its columns: ``add``, ``as_elements``.)"""
        if not self.buffer:
            return True
        try:
            stacked = stack_fast(self.buffer, "interleave")
        except Exception:  # noqa: BLE001 - elements that do not stack alike: the element way takes them
            return False
        self.columns.push_front(stacked)
        self.buffer.clear()
        return True

    def _held_elements(self) -> list:
        pending = self.columns.get_state()["pending"]
        rows = [row for piece in pending for row in structure.unstack_rows(piece, structure.batched_len(piece))]
        return self.buffer + rows

    def close(self):
        if self.iterator is not None:
            self.iterator.close()
            self.iterator = None

    def state(self) -> dict:
        inner = self.iterator.get_state() if self.iterator is not None else self.restore
        return {"element": self.element, "position": self.position, "inner": inner,
                "buffer": self._held_elements(), "ended": self.ended,
                "input_error": None if self.input_error is None else Failure(self.input_error)}

    @classmethod
    def restored(cls, saved: dict) -> "Slot":
        slot = cls(saved["element"], saved["position"])
        slot.restore = saved["inner"]
        slot.buffer = list(saved["buffer"])
        slot.failures = sum(type(x) is Failure for x in slot.buffer)
        slot.ended = bool(saved["ended"])
        slot.input_error = None if saved["input_error"] is None else saved["input_error"].error
        return slot


class SlotCycle(Iterator):
    """The consumer side of the slot model; subclasses say how an empty slot is filled and how a slot
    gets data (``_refill_slot``, ``_await``)."""

    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        self._cycle = node.cycle
        self._block_length = node.block_length
        self._read = max(node.block_length, FIRST_READ)
        self._slots: list = [None] * self._cycle
        self._c = 0
        self._b = 0
        self._position = 0  # input elements consumed
        self._input_done = False
        self._lock = contextlib.nullcontext()  # the parallel iterator guards buffers with a real lock

    # ------------------------------------------------------------------ hooks
    def _refill_slot(self):
        """A new slot for the empty current one; None when the input is exhausted. May raise an input error
        (in its place: the slot stays empty and the cycle stays)."""
        raise NotImplementedError

    def _await(self, slot: Slot, have_output: bool) -> bool:
        """Make ``slot.buffer`` non-empty or ``slot.ended`` (lock held); False: return what we have now."""
        raise NotImplementedError

    def _consumed(self, slot: Slot) -> None:
        """Elements left ``slot.buffer`` (lock held)."""

    def _adapt(self, items: list) -> None:
        """Size reads by bytes (judged from a read's first element), so read-ahead of large elements --
        image records, decoded arrays -- stays bounded in memory and in the saved state."""
        if not items:
            return
        if type(items) is Rows:
            size = sum(len(x) if isinstance(x, bytes) else getattr(x, "nbytes", 8) for x in items.first_leaves())
            self._read = max(self._block_length, min(READ_ROWS, READ_BYTES // max(size, 1)))
            return
        first = items[0]
        if type(first) is bytes:  # records, lines: the common case, without flattening a structure
            size = len(first)
        elif type(first) is Failure:
            return
        else:
            size = sum(len(x) if isinstance(x, bytes) else getattr(x, "nbytes", 8)
                       for x in structure.flatten(first))
        self._read = max(self._block_length, min(READ_AHEAD, READ_BYTES // max(size, 1)))

    # ------------------------------------------------------------------ consumer
    def _advance(self):
        self._b = 0
        self._c = (self._c + 1) % self._cycle

    def _short(self, slot: Slot, need: int) -> None:
        """Before a weave: ``slot`` holds fewer than ``need`` elements. The sequential iterator reads it now
        -- the read the element-by-element path would make when it reached the slot -- so the weave covers
        the whole request; the parallel one leaves it to its readers."""

    def _fill_for_columns(self, slot: Slot, need: int) -> None:
        """Before ``_columns_ready`` judges ``slot`` (lock held): it holds fewer than ``need`` rows. ``_short`` here;
        the parallel iterator also waits for a read running in a reader, which the batch needs either way."""
        self._short(slot, need)

    def _weave(self, out: list, want: int) -> None:
        """Whole rounds over all slots at once, when every slot has buffered enough (lock held)."""
        B, C = self._block_length, self._cycle
        rounds = want // (B * C)
        if self._b or not rounds:
            return
        order = self._slots[self._c:] + self._slots[:self._c]
        if None in order:  # (before any slot's rows become elements: a batch may yet take them as columns)
            return
        for slot in order:
            if slot.held() < rounds * B and not slot.ended and not slot.failures:
                self._short(slot, rounds * B)
            slot.as_elements(rounds * B)
            buf = slot.buffer
            rounds = min(rounds, len(buf) // B)
            if not rounds or slot.failures:  # failures go through the element-by-element path
                return
        n = rounds * B
        if B == 1:  # strided slice assignments: list copies in C, ~3x faster than zip + chain
            k = len(order)
            woven = [None] * (n * k)
            for j, slot in enumerate(order):
                woven[j::k] = slot.buffer[:n]
            out.extend(woven)
        else:
            for j in range(0, n, B):
                for slot in order:
                    out.extend(slot.buffer[j:j + B])
        for slot in order:
            del slot.buffer[:n]
            self._consumed(slot)

    def _columns_ready(self, want: int) -> bool:
        """(Lock held.) Whether the next ``want`` elements can go as woven columns: every slot of the cycle, from
        the current one, holds columns only, a whole round's share of ``want`` each (after the reads the element
        way's weave would make now), of one layout. A batch's element-way call (after the slots opened: the
        first batch, a new group of files) then stops there and the batch takes the rest by ``next_rows``,
        instead of the weave turning those rows into elements and the batch stacking them again."""
        B = self._block_length
        need = want // (B * self._cycle) * B
        if not need:
            return False
        order = self._slots[self._c:] + self._slots[:self._c]
        for slot in order:
            if slot is None or slot.buffer:
                return False
            if slot.columns.rows < need and not slot.ended:
                self._fill_for_columns(slot, need)
            if slot.buffer or slot.columns.rows < need:
                return False
        return self._agreeing_heads(order) is not None

    def _agreeing_heads(self, order):
        """The structure and layout (``RowQueue.head``) the slots' front pieces share, or None when they differ
        (inner datasets of different structures or dtypes: the element way)."""
        heads = [slot.columns.head() for slot in order]
        template, layout = heads[0]
        templates = [h[0] for h in heads]
        if not (len(templates) == len(self._agreed) and all(map(operator.is_, templates, self._agreed))):
            for other, other_layout in heads[1:]:
                if other_layout != layout or not structure.same_structure(other, template):
                    return None
            self._agreed = templates  # these pieces agree: the next checks of them need not look again
        return template, layout

    def _next_many(self, n):
        out: list = []
        try:
            while len(out) < n:
                if not self._b and n - len(out) >= self._block_length * self._cycle:
                    with self._lock:
                        if out and self._stacked and self._columns_ready(n - len(out)):
                            break  # a batch's call: it takes the rest as woven columns (``next_rows``)
                        self._weave(out, n - len(out))
                    if len(out) >= n:
                        break
                slot = self._slots[self._c]
                if slot is None:
                    slot = self._refill_slot()
                    if slot is not None:
                        self._slots[self._c] = slot
                        continue
                    if not any(self._slots):
                        break
                    self._advance()
                    continue
                with self._lock:
                    if not slot.held() and not slot.ended and not self._await(slot, bool(out)):
                        break
                    if slot is not self._slots[self._c]:  # deterministic=False switched slots
                        continue
                    slot.as_elements(min(n - len(out), self._block_length - self._b))
                    buf = slot.buffer
                    if not buf:  # ended
                        slot.close()
                        self._slots[self._c] = None
                        self._advance()
                        continue
                    if type(buf[0]) is Failure:
                        if out:
                            break
                        failure = buf.pop(0)
                        slot.failures -= 1
                        self._consumed(slot)
                        raise failure.error
                    k = min(n - len(out), self._block_length - self._b, len(buf))
                    if slot.failures:
                        k = next((j for j in range(k) if type(buf[j]) is Failure), k)
                    out.extend(buf[:k])
                    del buf[:k]
                    self._b += k
                    if self._b == self._block_length:
                        self._advance()
                        if not self._stacked:  # (else the loop's top weaves, or leaves the rest to columns)
                            self._weave(out, n - len(out))
                    self._consumed(slot)
        except Exception as e:  # noqa: BLE001 - an input error, delivered after the elements before it
            return self._deliver_before(out, e)
        return out

    def _next(self):
        out = self._next_many(1)
        if not out:
            raise StopIteration
        return out[0]

    # ------------------------------------------------------------------ stacked rows
    stacks_rows = True  # a batch above asks ``next_rows``; the slots then read stacked rows where they can
    _stacked = False  # set by the first ``next_rows``: reads ask inner iterators for stacked rows
    _agreed: list = []  # the slots' head pieces last found of one structure and layout (``_weave_rows``)
    _woven = None  # a WovenRounds: rounds of the slots' front pieces woven at an earlier request (``_weave_rows``)

    def next_rows(self, n):
        """Whole rounds of the slots' columns, woven as one stacked block: ``(rows, count)``; ``(None, -1)``
        when the next elements go element by element (``next_many``). Never ``(None, 0)``: the end is found
        by ``next_many``."""
        if self._deferred is not None:
            self._raise_deferred()
        self._stacked = True
        if self._b or n < self._block_length * self._cycle:
            return None, -1
        with self._lock:
            return self._weave_rows(n)

    def _weave_rows(self, want):
        """``_weave`` for columns (lock held): every slot of the cycle holds columns only, of one layout."""
        B, C = self._block_length, self._cycle
        rounds = want // (B * C)
        woven = self._woven
        if woven is not None:  # rounds woven at an earlier request, if the slots still hold them
            self._woven = None
            if woven.stands(self._c, self._slots):
                rows = woven.take(rounds)
                for slot in woven.slots:
                    self._consumed(slot)
                if not woven.done():
                    self._woven = woven
                return rows
        order = self._slots[self._c:] + self._slots[:self._c]
        for slot in order:
            if slot is None or slot.failures or not slot.stack_buffer():
                return None, -1
            if slot.columns.rows < rounds * B and not slot.ended:
                self._short(slot, rounds * B)
                if not slot.held() and not slot.ended:  # nothing yet: wait for it here (as the element way
                    # would when it reached the slot) rather than take this round element by element
                    current = self._slots[self._c]
                    if not self._await(slot, False) or self._slots[self._c] is not current:
                        return None, -1  # closed, or deterministic=False moved to another slot
        # A wait above releases the lock (parallel readers): a slot checked before it may since have taken a
        # read of elements, which turns its columns back into elements (``Slot.add``), or been replaced. So
        # the weave is judged again here, in one pass with the lock held throughout.
        if any(map(operator.is_not, order, self._slots[self._c:] + self._slots[:self._c])):
            return None, -1
        for slot in order:
            if slot.failures or not slot.stack_buffer():
                return None, -1
            rounds = min(rounds, slot.columns.rows // B)
            if not rounds:
                return None, -1
        agreed = self._agreeing_heads(order)
        if agreed is None:
            return None, -1  # inner datasets of different structures or dtypes: the element way
        template, layout = agreed
        ahead = min(slot.columns.front_rows() for slot in order) // B  # whole rounds of the front pieces
        if ahead > rounds:  # the front pieces hold more whole rounds than asked: weave them all now
            woven = WovenRounds(self._c, order, B, template, layout, ahead)
            rows = woven.take(rounds)
            for slot in order:
                self._consumed(slot)
            self._woven = woven
            return rows
        n = rounds * B
        parts = [slot.columns.take_leaves(n)[1] for slot in order]
        for slot in order:
            self._consumed(slot)
        return structure.pack_as(template, weave_leaves(parts, layout, rounds, B)), n * C

    # ------------------------------------------------------------------ state
    def _open_slots(self) -> list:
        return [s for s in self._slots if s is not None]

    def children(self):
        return [self.input] + [s.iterator for s in self._open_slots() if s.iterator is not None]

    def get_state(self):
        return {"input": self.input.get_state(), "c": self._c, "b": self._b, "position": self._position,
                "input_done": self._input_done, "slots": [None if s is None else s.state() for s in self._slots],
                "deferred": saved_error(self._deferred)}

    def set_state(self, state):
        for slot in self._open_slots():
            slot.close()
        self.input.set_state(state["input"])
        self._c, self._b = int(state["c"]), int(state["b"])
        self._position = int(state["position"])
        self._input_done = bool(state["input_done"])
        self._slots = [None if s is None else Slot.restored(s) for s in state["slots"]]
        self._woven = None  # (it would not stand for the restored slots; dropped now, not at the next request)
        self._deferred = restored_error(state["deferred"], "'deferred'")


class InterleaveIterator(SlotCycle):
    """Sequential: an empty slot takes the next input element when the cycle reaches it; a slot's inner
    iterator is read (a block at a time) when its buffer is empty."""

    def _refill_slot(self):
        if self._input_done:
            return None
        try:
            element = self.input.next()
        except StopIteration:
            self._input_done = True
            return None
        self._position += 1
        return Slot(element, self._position - 1)

    def _await(self, slot, have_output):
        self._read_into(slot)
        return True

    def _short(self, slot, need):
        while slot.held() < need and not slot.ended and not slot.failures:
            self._read_into(slot)

    def _read_into(self, slot):
        items, ended = slot.read(self.node, self.ctx, self._read, self._stacked)
        self._adapt(items)
        slot.add(items, ended)
