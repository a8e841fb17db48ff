"""``shuffle``: the buffer algorithm, over elements or -- for random-access inputs -- over indices.

The buffer fills with the first ``buffer_size`` inputs; each output takes a uniformly random slot and
refills it with the next input; at the end the rest drains at random. Output k therefore always comes from
an input index below k + buffer_size. Over an index stream the buffer holds integers, so a shuffled
``batch`` is still one vectorised gather and the saved state holds no elements.

Random slots come from uniform doubles drawn 1024 at a time from a PCG64 generator keyed on (seeds,
iteration); the state stores the generator as it was before the current draw and how many were used,
so a restored iterator continues with exactly the same choices.

Over indices the steady state (buffer full, input not exhausted) runs a chunk of steps at once in numpy:
step t writes input x_t into slot j_t, so output k is the x of the latest earlier step that wrote slot
j_k, or the slot's value at the start of the chunk. A stable argsort by slot finds those "previous
writers". A chunk runs to the end of the current draw (up to DRAW steps, however few indices were asked
for); the outputs not yet asked for wait in ``_ahead`` (part of the saved state). The choices and outputs
are exactly the step-by-step algorithm's; only the draining at the end runs step by step.

An input error is raised where the failed input would have entered the buffer, after the outputs before it,
and takes no slot and no draw: the fill goes on at the next call (the buffer stays ``buffer_size``), and the
outputs are those of the same input without its failing elements. An error due after the outputs a call
returned is kept in the state (``deferred``), never dropped.
"""

from __future__ import annotations

import numpy as np

from .. import random_seed
from .base import Iterator
from ..engine.blocks import restored_error, saved_error
from ..engine.registry import builds
from ..nodes.shuffle import Shuffle

DRAW = 1024
FILL_BLOCK = 4096


@builds(Shuffle)
class ShuffleIterator(Iterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        self.index_source = self.input.index_source
        self._indices = self.index_source is not None
        self._capacity = node.buffer_size if node.buffer_size > 0 else None  # None: everything
        seeds = node.seeds
        if seeds is None:  # unseeded: fresh per iterator tree, shared by its epochs
            seeds = ctx.fresh_seeds(node)
        self._seeds = tuple(seeds)
        keys = ctx.iteration if node.reshuffle_each_iteration else ()
        self._rng = random_seed.generator(self._seeds, *keys)
        self._redraw()
        self._buffer: list = []
        self._incoming: list = []  # fetched from the input, not yet in the buffer
        self._ahead = _NO_INDICES  # over indices: outputs computed (to the end of a draw), not yet asked for
        self._input_done = False
        self._filled = False

    def _redraw(self):
        """The next DRAW uniform doubles; remember the generator's state before them (for saving)."""
        self._draw_from = random_seed.generator_state(self._rng)
        self._set_draw(self._rng.random(DRAW))
        self._used = 0

    def _set_draw(self, u):
        self._u_array = u
        # the step-by-step loops read Python floats faster; the vectorised steady state needs none
        self._u = None if self._indices else u.tolist()

    # ------------------------------------------------------------------ input
    def _pull(self, n):
        if self._indices:
            return self.input.next_indices(n).tolist()
        return self.input.next_many(n)

    def _next_input(self):
        """The next input item, or a sentinel at the end."""
        if not self._incoming:
            if self._input_done:
                return _END
            self._incoming = self._pull(FILL_BLOCK)
            self._incoming.reverse()  # pop() from the end is O(1)
            if not self._incoming:
                self._input_done = True
                return _END
        return self._incoming.pop()

    def _fill(self):
        # Filled only once the buffer is full (or the input ended): an input error raised on the way leaves
        # what came before it in the buffer, and the next call fills on (as tf.data's fill) -- no smaller
        # buffer for the rest of the epoch, and over indices the buffer is still the list the rest expects.
        cap = self._capacity
        while cap is None or len(self._buffer) < cap:
            want = FILL_BLOCK if cap is None else min(FILL_BLOCK, cap - len(self._buffer))
            items = self._pull(want)
            if not items:
                self._input_done = True
                break
            self._buffer.extend(items)
        self._filled = True

    # ------------------------------------------------------------------ output
    def _take(self, n) -> list:
        if not self._filled:
            self._fill()
        buf, out = self._buffer, []
        while len(out) < n and buf:
            if self._used == DRAW:
                self._redraw()
            j = int(self._u[self._used] * len(buf))
            try:
                item = self._next_input()
            except Exception as e:  # noqa: BLE001 - the input's error, in the place of the input that failed
                # This step has not happened (no draw used, the slot keeps its element): the next call takes
                # the same slot and refills it with the input after the failed one -- the choices of a run
                # without the failing inputs. The elements before it are delivered first.
                return self._deliver_before(out, e)
            self._used += 1
            out.append(buf[j])
            if item is _END:
                buf[j] = buf[-1]
                buf.pop()
            else:
                buf[j] = item
        return out

    def _next(self):
        if self._indices:
            idx = self.next_indices(1)
            if not len(idx):
                raise StopIteration
            return self.index_source.element_at(int(idx[0]))
        out = self._take(1)
        if not out:
            raise StopIteration
        return out[0]

    def _next_many(self, n):
        if self._indices:
            return super()._next_many(n)
        return self._take(n)

    def next_indices(self, n):
        if self._deferred is not None:  # an input error due after the indices the last call returned
            self._raise_deferred()
        if not self._filled:
            self._fill()
            self._buffer = np.asarray(self._buffer, dtype=np.int64)
            self._incoming = np.asarray(self._incoming[::-1], dtype=np.int64)  # forward order
        ahead = self._ahead
        if len(ahead) >= n:
            self._ahead = ahead[n:]
            return ahead[:n]
        parts, want = ([ahead] if len(ahead) else []), n - len(ahead)
        self._ahead = _NO_INDICES
        while want > 0:
            if self._used == DRAW:
                self._redraw()
            if not len(self._incoming) and not self._input_done:
                try:
                    self._incoming = self.input.next_indices(max(FILL_BLOCK, want))
                except Exception as e:  # noqa: BLE001 - the input's error: after the indices made so far
                    return self._deliver_before(np.concatenate(parts) if parts else _NO_INDICES, e)
                self._input_done = not len(self._incoming)
            if len(self._incoming):
                out = self._steady_chunk(min(DRAW - self._used, len(self._incoming)))
                if len(out) > want:
                    out, self._ahead = out[:want], out[want:]
            elif len(self._buffer):
                out = self._drain(want)
            else:
                break
            parts.append(out)
            want -= len(out)
        if len(parts) == 1:
            return parts[0]
        return np.concatenate(parts) if parts else _NO_INDICES

    def _steady_chunk(self, k: int) -> np.ndarray:
        """``k`` steps with a full buffer and ``k`` inputs at hand, vectorised (see module docstring)."""
        buf, x = self._buffer, self._incoming[:k]
        u = self._u_array[self._used:self._used + k]
        self._used += k
        slots = (u * len(buf)).astype(np.int64)  # the same doubles and product as int(u * len(buf))
        out = buf.take(slots)  # each slot's value at the start of the chunk
        # by slot, then by step (a radix sort when the slots fit 16 bits)
        order = np.argsort(slots.astype(np.uint16) if len(buf) <= 1 << 16 else slots, kind="stable")
        sorted_slots = slots.take(order)
        again = sorted_slots[1:] == sorted_slots[:-1]  # order[i + 1] writes the slot order[i] wrote
        if again.any():
            out[order[1:][again]] = x.take(order[:-1][again])  # a slot written earlier in the chunk
            last = np.append(~again, True)  # the last writer of each slot
            buf[sorted_slots[last]] = x.take(order[last])
        else:
            buf[slots] = x
        self._incoming = self._incoming[k:]
        return out

    def _drain(self, n: int) -> np.ndarray:
        """Up to ``n`` steps after the input ended: emit a random slot, move the last slot into it."""
        buf = self._buffer
        size = len(buf)
        slots = memoryview(buf)  # Python ints in and out of the array in place: a list's speed, not its memory
        out = []
        used = self._used
        u = self._u if self._u is not None else self._u_array.tolist()
        while len(out) < n and size:
            if used == DRAW:
                self._redraw()
                used, u = 0, self._u_array.tolist()
            j = int(u[used] * size)
            used += 1
            out.append(slots[j])
            size -= 1
            slots[j] = slots[size]
        slots.release()
        self._buffer = buf[:size]
        self._used = used
        self._u = u
        return np.array(out, dtype=np.int64)

    def children(self):
        return [self.input]

    # ------------------------------------------------------------------ state
    def get_state(self):
        # over indices, once filled, the buffer and the pending inputs are int64 arrays (pending in input
        # order); over elements they are lists (pending inputs reversed, popped from the end)
        return {"input": self.input.get_state(), "seeds": list(self._seeds), "draw_from": self._draw_from,
                "used": self._used, "buffer": _copy(self._buffer), "incoming": _copy(self._incoming),
                "ahead": self._ahead.copy(), "input_done": self._input_done, "filled": self._filled,
                "deferred": saved_error(self._deferred)}  # the input's error, due after what was returned

    def set_state(self, state):
        self.input.set_state(state["input"])
        self._seeds = tuple(state["seeds"])
        self._draw_from = state["draw_from"]
        self._rng = random_seed.restore_generator(self._draw_from)
        self._set_draw(self._rng.random(DRAW))
        self._used = int(state["used"])
        self._input_done = bool(state["input_done"])
        self._filled = bool(state["filled"])
        self._ahead = np.array(state.get("ahead", ()), dtype=np.int64)  # (states saved before it existed)
        self._deferred = restored_error(state.get("deferred"), "'deferred'")  # (the same)
        if self._indices and self._filled:
            self._buffer = np.asarray(state["buffer"], dtype=np.int64).copy()
            self._incoming = np.asarray(state["incoming"], dtype=np.int64).copy()
        else:
            self._buffer = list(state["buffer"])
            self._incoming = list(state["incoming"])


def _copy(items):
    return items.copy() if isinstance(items, np.ndarray) else list(items)


_END = object()
_NO_INDICES = np.empty(0, np.int64)
