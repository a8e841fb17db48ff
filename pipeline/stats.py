"""Per-node statistics and the bottleneck report (``Options.experimental_statistics = True``).

Zero cost when off: ``IteratorContext.build`` wraps iterators in ``_Timed`` only when a recorder exists,
so the hot path of an unobserved pipeline contains no timing code at all.

Per node (aggregated over every iterator of that node, e.g. every epoch of a repeat):

- ``elements``  -- elements it produced;
- ``wait``      -- seconds its consumer spent inside its ``next`` calls (what downstream waited on it);
- ``busy``      -- its own work: ``wait`` minus the time spent in its (wrapped) inputs on the same thread;
  for stages that work on background threads or processes (parallel map, prefetch), the workers' measured
  function time divided by their parallelism, since their consumer-side time is waiting, not work;
- ``fill``      -- mean buffer fill (0..1) of buffered stages, sampled at each call;
- ``executor``  -- for a parallel map whose executor AUTOTUNE chose: "thread" or "process" and why (printed
  under the table: ``executor of map(...): process (function holds the GIL: cpu/wall 0.97 on 2 threads...)``).

The bottleneck is the node with the most ``busy`` time: speeding up any other node cannot help much.
"""

from __future__ import annotations

import threading
import time

from . import graph

_perf = time.perf_counter


class NodeStats:
    __slots__ = ("node", "elements", "wait", "child", "fill_sum", "fill_n", "iterators")

    def __init__(self, node):
        self.node = node
        self.elements = 0
        self.wait = 0.0
        self.child = 0.0  # time in wrapped inputs called from this node's calls, same thread
        self.fill_sum = 0.0
        self.fill_n = 0
        self.iterators: list = []

    @property
    def busy(self) -> float:
        work = [w for w in (_work_seconds(it) for it in self.iterators) if w is not None]
        if work:
            return sum(work)
        return max(0.0, self.wait - self.child)

    @property
    def fill(self):
        return self.fill_sum / self.fill_n if self.fill_n else None


def _work_seconds(it):
    seconds = getattr(it, "work_seconds", None)
    if seconds is None:
        return None
    return seconds / max(1, getattr(it, "workers", 1) or 1)


def _executor(stats):
    """The executor AUTOTUNE chose for the node's latest iterator, with its reason; None where it chose none."""
    for it in reversed(stats.iterators):
        decision = getattr(it, "executor_decision", None)
        if decision is not None:
            return str(decision)
    return None


class StatsRecorder:
    def __init__(self):
        self.by_node: dict[int, NodeStats] = {}
        self._local = threading.local()

    def wrap(self, iterator):
        stats = self.by_node.get(id(iterator.node))
        if stats is None:
            stats = self.by_node[id(iterator.node)] = NodeStats(iterator.node)
        stats.iterators.append(iterator)
        return _Timed(iterator, stats, self._local)

    def report(self, root_iterator) -> "StatsReport":
        root = getattr(root_iterator, "node", None)
        order = [id(n) for n in graph.walk(root)] if root is not None else []
        rows = [self.by_node[i] for i in order if i in self.by_node]
        rows += [s for i, s in self.by_node.items() if i not in order]
        return StatsReport(rows)


class _Timed:
    """An iterator that times its inner iterator's calls; everything else is delegated unchanged."""

    def __init__(self, inner, stats: NodeStats, local):
        self.inner = inner
        self.stats = stats
        self._local = local
        self._fill = getattr(inner, "buffer_fill", None)

    def __getattr__(self, name):  # node, ctx, index_source, get_state, children, close, ...
        return getattr(self.inner, name)

    def _call(self, fn, *args):
        local = self._local
        outer = getattr(local, "frame", None)
        frame = local.frame = [0.0]
        t0 = _perf()
        try:
            return fn(*args)
        finally:
            dt = _perf() - t0
            local.frame = outer
            s = self.stats
            s.wait += dt
            s.child += frame[0]
            if outer is not None:
                outer[0] += dt
            if self._fill is not None:
                s.fill_sum += self._fill()
                s.fill_n += 1

    def next(self):
        x = self._call(self.inner.next)
        self.stats.elements += 1
        return x

    def next_many(self, n):
        out = self._call(self.inner.next_many, n)
        self.stats.elements += len(out)
        return out

    def next_rows(self, n):  # stacked rows (engine/blocks.py): ``(rows, count)``, count <= 0 for none
        rows, k = self._call(self.inner.next_rows, n)
        if k > 0:
            self.stats.elements += k
        return rows, k

    def next_indices(self, n):
        out = self._call(self.inner.next_indices, n)
        self.stats.elements += len(out)
        return out


class StatsReport:
    """``str()`` is a table; ``.bottleneck`` is the label of the node with the most busy time."""

    def __init__(self, rows: list[NodeStats]):
        self.rows = [{"node": s.node.label(), "kind": s.node.kind, "elements": s.elements,
                      "busy_s": s.busy, "wait_s": s.wait, "fill": s.fill, "executor": _executor(s)} for s in rows]
        busiest = max(self.rows, key=lambda r: r["busy_s"], default=None)
        self.bottleneck = busiest["node"] if busiest else None

    def __getitem__(self, kind_or_label):
        for r in self.rows:
            if r["node"] == kind_or_label or r["kind"] == kind_or_label:
                return r
        raise KeyError(kind_or_label)

    def __str__(self):
        lines = [f"{'node':<48} {'elements':>10} {'busy s':>9} {'us/elem':>8} {'wait s':>9} {'fill':>5}"]
        for r in self.rows:
            per = 1e6 * r["busy_s"] / r["elements"] if r["elements"] else 0.0
            fill = "" if r["fill"] is None else f"{r['fill']:.2f}"
            name = r["node"] if len(r["node"]) <= 48 else r["node"][:45] + "..."
            lines.append(f"{name:<48} {r['elements']:>10} {r['busy_s']:>9.4f} {per:>8.2f} {r['wait_s']:>9.4f} "
                         f"{fill:>5}")
        for r in self.rows:  # what AUTOTUNE chose for a parallel map, and why (engine/executor_choice.py)
            if r["executor"] is not None:
                lines.append(f"executor of {r['node']}: {r['executor']}")
        lines.append(f"bottleneck: {self.bottleneck}")
        return "\n".join(lines)

    __repr__ = __str__
