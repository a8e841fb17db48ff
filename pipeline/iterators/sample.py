"""``sample_from_datasets`` / ``choose_from_datasets``: a stream of choices picks the input of each element.

Inputs are read in blocks into per-input queues, so picking an element is a queue pop. Random choices
come from uniform doubles drawn 1024 at a time from a PCG64 generator keyed on (seeds, iteration when
rerandomising); the state keeps the generator as it was before the current draw and how many were used,
so a restored iterator makes exactly the same choices. An error from an input takes the place of the
element it was chosen for (the choice is used up), after the elements before it.
"""

from __future__ import annotations

import bisect
import collections

import numpy as np

from .. import random_seed, structure
from ..errors import InvalidArgumentError
from .base import BlockIterator
from ..engine.blocks import restored_error, saved_error
from ..engine.registry import builds
from ..nodes.sample import ChooseFromDatasets, SampleFromDatasets

DRAW = 1024
BLOCK = 64


class _DirectedIterator(BlockIterator):
    """Per-input queues and the pick loop; subclasses supply the choices."""

    def __init__(self, node, ctx, data_nodes):
        super().__init__(node, ctx)
        self.inputs = [ctx.build(d) for d in data_nodes]
        self._queues = [collections.deque() for _ in self.inputs]
        self._exhausted = [False] * len(self.inputs)
        self._done = False
        self._label = node.label()
        # dicts come out in the spec's key order whichever input made them (tf.data packs by the spec)
        self._order = structure.spec_key_order(node.element_spec)

    def _choose(self, want: int):
        """The next input index; None when the choices have ended."""
        raise NotImplementedError

    def _on_exhausted(self, i: int) -> None:
        self._exhausted[i] = True
        if self.node.stop_on_empty_dataset or all(self._exhausted):
            self._done = True

    def _next_many(self, n):
        out: list = []
        try:
            while len(out) < n and not self._done:
                i = self._choose(n - len(out))
                if i is None:
                    self._done = True
                    break
                if self._exhausted[i]:  # choose_from_datasets without stop_on_empty_dataset: skip
                    continue
                queue = self._queues[i]
                if not queue:
                    got = self.inputs[i].next_many(min(n - len(out), BLOCK))
                    if not got:
                        self._on_exhausted(i)
                        continue
                    queue.extend(got)
                out.append(queue.popleft())
        except Exception as e:  # noqa: BLE001 - delivered after the elements before it
            out = self._deliver_before(out, e)
        order = self._order
        return out if order is None else [order(e) for e in out]

    def children(self):
        return list(self.inputs)

    def get_state(self):
        return {"inputs": [it.get_state() for it in self.inputs], "queues": [list(q) for q in self._queues],
                "exhausted": list(self._exhausted), "done": self._done,
                "deferred": saved_error(self._deferred)}

    def set_state(self, state):
        for it, saved in zip(self.inputs, state["inputs"]):
            it.set_state(saved)
        self._queues = [collections.deque(q) for q in state["queues"]]
        self._exhausted = [bool(x) for x in state["exhausted"]]
        self._done = bool(state["done"])
        self._deferred = restored_error(state["deferred"], "'deferred'")


@builds(SampleFromDatasets)
class SampleIterator(_DirectedIterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx, node.inputs)
        seeds = node.seeds if node.seeds is not None else ctx.fresh_seeds(node)
        self._seeds = tuple(seeds)
        keys = ctx.iteration if node.rerandomize_each_iteration else ()
        self._rng = random_seed.generator(self._seeds, *keys)
        self._draw_from = random_seed.generator_state(self._rng)
        self._u = self._rng.random(DRAW).tolist()
        self._used = 0
        self._cdf = self._make_cdf()

    def _make_cdf(self):
        """Cumulative weights of the inputs not yet exhausted; None when none with a weight is left."""
        w = np.where(self._exhausted, 0.0, np.asarray(self.node.weights))
        total = w.sum()
        if total <= 0:
            return None
        cdf = np.cumsum(w) / total
        cdf[int(np.flatnonzero(w)[-1]):] = 1.0  # u < 1 never lands past the last input with a weight
        return cdf.tolist()

    def _on_exhausted(self, i):
        super()._on_exhausted(i)
        self._cdf = self._make_cdf()
        if self._cdf is None:
            self._done = True

    def _choose(self, want):
        if self._cdf is None:
            return None
        if self._used == DRAW:
            self._draw_from = random_seed.generator_state(self._rng)
            self._u = self._rng.random(DRAW).tolist()
            self._used = 0
        u = self._u[self._used]
        self._used += 1
        return bisect.bisect_right(self._cdf, u)

    def get_state(self):
        state = super().get_state()
        state.update(seeds=list(self._seeds), draw_from=self._draw_from, used=self._used)
        return state

    def set_state(self, state):
        super().set_state(state)
        self._seeds = tuple(state["seeds"])
        self._draw_from = state["draw_from"]
        self._rng = random_seed.restore_generator(self._draw_from)
        self._u = self._rng.random(DRAW).tolist()
        self._used = int(state["used"])
        self._cdf = self._make_cdf()


@builds(ChooseFromDatasets)
class ChooseIterator(_DirectedIterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx, node.inputs[:-1])
        self.choices = ctx.build(node.inputs[-1])
        self._pending: collections.deque = collections.deque()  # choices read, not yet used

    def _choose(self, want):
        if not self._pending:
            got = self.choices.next_many(min(want, BLOCK))
            if not got:
                return None
            self._pending.extend(got)
        value = int(self._pending.popleft())
        if not 0 <= value < len(self.inputs):
            raise InvalidArgumentError(f"{self._label}: selected out-of-range dataset index {value}; "
                                       f"choose_from_datasets has {len(self.inputs)} datasets.", self._label)
        return value

    def children(self):
        return super().children() + [self.choices]

    def get_state(self):
        state = super().get_state()
        state.update(choices=self.choices.get_state(), pending=[int(v) for v in self._pending])
        return state

    def set_state(self, state):
        super().set_state(state)
        self.choices.set_state(state["choices"])
        self._pending = collections.deque(state["pending"])
