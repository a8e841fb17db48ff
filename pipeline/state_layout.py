"""The layout of a saved iterator state, and whether it stays the same from step to step.

A state's *layout* is what a reader of the state relies on, without its values: dict keys and nesting, the
type of every leaf (numpy arrays and scalars by dtype, arrays by rank too), tuple lengths. The resume harness
(``testing.assert_resumes_everywhere``) checks, as Grain's does, that every state of one pipeline has the
same layout, whichever step it was saved at. Three things are deliberately not layout:

- the length of a list whose items share one layout: such lists are buffers (elements read ahead, results
  made ahead). A list whose items differ (the states of a zip's inputs) is positional, like a tuple;
- ``None``: a field not set yet (a reader before its first file, a slot not opened) matches any layout;
- ``blocks.Failure``: an error held in a buffer in place of an element matches the elements' layout.

``known_varying()`` lists the iterators whose layout does change today, each with the state key where it
does and why; a pipeline holding such a node is let through at that key only. Each entry is a state-format
question left open for the maintainers (issue 17): remove the entry when the format is made stable.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

ANY = ("any",)  # the layout of None: matches every layout


class Conflict(NamedTuple):
    path: str  # where, as state[...] subscripts
    first: tuple  # the layout seen first
    second: tuple  # the one that does not fit it
    trail: tuple  # (keys of the dict, key taken) for every dict from the root down to the conflict
    own_keys: frozenset  # for two dicts with different keys: all their keys (else empty)

    def under(self, key, beside=None) -> bool:
        """Whether the conflict lies under ``key`` of a dict that (if ``beside`` is given) also has ``beside``."""
        return any(k == key and (beside is None or beside in keys) for keys, k in self.trail)


def layout(value) -> tuple:
    """The layout of ``value`` (see the module docstring)."""
    from .engine.blocks import Failure

    if value is None or type(value) is Failure:
        return ANY
    if isinstance(value, dict):
        return ("dict", tuple(sorted(((k, layout(v)) for k, v in value.items()), key=lambda kv: repr(kv[0]))))
    if isinstance(value, list):
        items = [layout(v) for v in value]
        item = ANY
        for one in items:
            item, conflict = unify(item, one)
            if conflict is not None:
                return ("seq", tuple(items))  # positional: each item keeps its own layout
        return ("list", item)
    if isinstance(value, tuple):
        return (type(value).__name__, tuple(layout(v) for v in value))
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.ndim)
    if isinstance(value, np.generic):
        return ("numpy", value.dtype.str)
    return (type(value).__name__,)


def unify(a: tuple, b: tuple, path: str = "state", trail: tuple = ()):
    """(the layout both ``a`` and ``b`` fit, None) or (None, the first ``Conflict``)."""
    if a == ANY:
        return b, None
    if b == ANY:
        return a, None
    if {a[0], b[0]} == {"list", "seq"}:  # a buffer-like list and a positional one: item by item
        lst, seq = (a, b) if a[0] == "list" else (b, a)
        b = ("seq", tuple(lst[1] for _ in seq[1]))
        a = seq
    if a[0] != b[0]:
        return None, Conflict(path, a, b, trail, frozenset())
    kind = a[0]
    if kind == "dict":
        da, db = dict(a[1]), dict(b[1])
        if set(da) != set(db):
            return None, Conflict(path, a, b, trail, frozenset(da) | frozenset(db))
        out = []
        for k, _ in a[1]:
            merged, conflict = unify(da[k], db[k], f"{path}[{k!r}]", trail + ((frozenset(da), k),))
            if conflict is not None:
                return None, conflict
            out.append((k, merged))
        return ("dict", tuple(out)), None
    if kind == "list":
        merged, conflict = unify(a[1], b[1], f"{path}[:]", trail)
        return (None, conflict) if conflict is not None else (("list", merged), None)
    if kind in ("ndarray", "numpy") or len(a) != 2 or not isinstance(a[1], tuple):
        return (a, None) if a == b else (None, Conflict(path, a, b, trail, frozenset()))
    if len(a[1]) != len(b[1]):  # tuples (namedtuples by their name) and positional lists
        return None, Conflict(path, a, b, trail, frozenset())
    out = []
    for i, (x, y) in enumerate(zip(a[1], b[1])):
        merged, conflict = unify(x, y, f"{path}[{i}]", trail)
        if conflict is not None:
            return None, conflict
        out.append(merged)
    return (kind, tuple(out)), None


def known_varying():
    """(node test, conflict test, why) for the iterators whose state layout changes between steps today."""
    from .nodes.cache import Cache
    from .nodes.concatenate import Concatenate
    from .nodes.flat_map import FlatMap
    from .nodes.interleave import Interleave
    from .nodes.shuffle import Shuffle
    from .nodes.unique import Unique

    return [
        (lambda node, options: isinstance(node, Cache), lambda c: "mode" in c.own_keys,
         "cache: the state holds what its mode needs -- only the mode before the first element, the input "
         "and what was recorded while recording, a position while replaying a file"),
        (lambda node, options: isinstance(node, Concatenate), lambda c: c.under("input", beside="which"),
         "concatenate: 'input' holds the state of the side being read, the first dataset's and then the "
         "second's"),
        (lambda node, options: isinstance(node, (FlatMap, Interleave)), lambda c: c.under("inner"),
         "flat_map / interleave: 'inner' holds the state of the dataset map_func made for the element being "
         "read, which may be another pipeline for each element (inherent, not a format defect)"),
        (lambda node, options: isinstance(node, Shuffle), lambda c: bool(c.trail) and c.trail[-1][1] == "buffer",
         "shuffle over indices: the buffer is saved as a list until it first fills, as an int64 array after"),
        (lambda node, options: isinstance(node, Unique), lambda c: "seen_tensors" in c.own_keys,
         "unique: 'seen_tensors' (non-scalar values seen) appears only once a non-scalar value has been seen"),
    ]


def excused(conflict: Conflict, dataset) -> str | None:
    """Why ``conflict`` is a known layout change of an iterator in ``dataset`` (``known_varying``), or None."""
    from . import graph

    options = dataset.options()
    nodes = list(graph.walk(dataset.node))
    for node_test, conflict_test, why in known_varying():
        if conflict_test(conflict) and any(node_test(node, options) for node in nodes):
            return why
    return None


def describe(conflict: Conflict) -> str:
    return f"{conflict.path}: {_show(conflict.first)} vs {_show(conflict.second)}"


def _show(lay) -> str:
    text = repr(lay)
    return text if len(text) <= 300 else text[:300] + "..."
