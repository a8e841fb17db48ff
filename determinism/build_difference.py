"""Where two builds of the same pipeline differ, for ``check_determinism`` given a function.

A pipeline that draws randomness while it is *built* -- a salt a map closes over, random numbers handed to
``from_tensor_slices``, a generator seeded from the clock -- is deterministic build by build, yet every
call of the function draws again, so two runs differ. Bisecting one build's graph cannot find that (each
of its prefixes repeats itself); comparing the builds can. ``first_difference(a, b)`` walks both graphs
(sources first) and names the first node whose arguments or captured values differ: a function's
closure cells, defaults and ``functools.partial`` arguments, a callable object's attributes, arrays by
content, generators by state. Values it cannot compare (opaque objects of the same type) count as equal.
"""

from __future__ import annotations

import functools
import random
import types

import numpy as np

from ..pipeline import graph

MAX_DEPTH = 4  # how far into captured functions and containers the comparison goes


def first_difference(a, b) -> tuple[object, str] | None:
    """(the node of build ``a`` that differs, what differs) or None when no difference is visible."""
    nodes_a, nodes_b = list(graph.walk(a)), list(graph.walk(b))
    for na, nb in zip(nodes_a, nodes_b):
        if type(na) is not type(nb):
            return na, f"the builds have different graphs: {na.kind} in one, {nb.kind} in the other"
        pa, pb = na.params(), nb.params()
        for key in list(pa) + [k for k in pb if k not in pa]:
            diff = _compare(pa.get(key), pb.get(key), key, 0)
            if diff is not None:
                return na, diff
    if len(nodes_a) != len(nodes_b):
        return a, f"the builds have different graphs ({len(nodes_a)} vs {len(nodes_b)} nodes)"
    return None


def _short(v) -> str:
    if isinstance(v, np.ndarray):
        return f"array(shape={v.shape}, dtype={v.dtype})"
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _compare(x, y, name: str, depth: int) -> str | None:
    """None when ``x`` and ``y`` look equal; else a sentence naming the value (``name``) and how it differs."""
    if x is y or depth > MAX_DEPTH:
        return None
    if type(x) is not type(y):
        return f"{name} is a {type(x).__name__} in one build and a {type(y).__name__} in the other"
    if isinstance(x, (np.ndarray, np.generic)):
        if x.dtype != y.dtype or x.shape != y.shape:
            return f"{name} is {_short(x)} in one build and {_short(y)} in the other"
        same = np.array_equal(x, y, equal_nan=x.dtype.kind in "fc")
        return None if same else f"{name} holds different values in each build ({_short(x)} vs {_short(y)})"
    if isinstance(x, (bool, int, float, complex, str, bytes, type(None))):
        if x == y or (isinstance(x, float) and x != x and y != y):
            return None
        return f"{name} is {_short(x)} in one build and {_short(y)} in the other"
    if isinstance(x, (tuple, list)):
        if len(x) != len(y):
            return f"{name} has {len(x)} items in one build and {len(y)} in the other"
        for i, (u, v) in enumerate(zip(x, y)):
            diff = _compare(u, v, f"{name}[{i}]", depth + 1)
            if diff is not None:
                return diff
        return None
    if isinstance(x, dict):
        if list(x) != list(y):
            return f"{name} has keys {list(x)} in one build and {list(y)} in the other"
        for k in x:
            diff = _compare(x[k], y[k], f"{name}[{k!r}]", depth + 1)
            if diff is not None:
                return diff
        return None
    if isinstance(x, types.FunctionType):
        return _compare_functions(x, y, name, depth)
    if isinstance(x, functools.partial):
        return (_compare(x.func, y.func, name, depth + 1)
                or _compare(x.args, y.args, f"{name}'s partial arguments", depth + 1)
                or _compare(x.keywords, y.keywords, f"{name}'s partial keywords", depth + 1))
    if isinstance(x, types.MethodType):
        return _compare(x.__func__, y.__func__, name, depth + 1) or \
            _compare(x.__self__, y.__self__, f"{name}'s object", depth + 1)
    if isinstance(x, np.random.Generator):
        same = x.bit_generator.state == y.bit_generator.state
        return None if same else f"{name} is a numpy Generator in a different state in each build"
    if isinstance(x, (np.random.RandomState, random.Random)):
        same = repr(x.get_state() if hasattr(x, "get_state") else x.getstate()) == \
            repr(y.get_state() if hasattr(y, "get_state") else y.getstate())
        return None if same else f"{name} is a {type(x).__name__} in a different state in each build"
    if getattr(x, "_node", None) is not None or hasattr(x, "inputs"):
        return None  # datasets and nodes: the graph walk compares them
    attrs_x, attrs_y = getattr(x, "__dict__", None), getattr(y, "__dict__", None)
    if isinstance(attrs_x, dict) and isinstance(attrs_y, dict) and callable(x):
        return _compare(attrs_x, attrs_y, f"{name}'s attributes", depth + 1)
    return None


def _compare_functions(f, g, name, depth):
    if f.__code__ is not g.__code__ and f.__code__.co_code != g.__code__.co_code:
        return f"{name} runs different code in each build"
    label = getattr(f, "__qualname__", name)
    cells_f = [c.cell_contents if _full(c) else None for c in (f.__closure__ or ())]
    cells_g = [c.cell_contents if _full(c) else None for c in (g.__closure__ or ())]
    for var, u, v in zip(f.__code__.co_freevars, cells_f, cells_g):
        diff = _compare(u, v, f"the value `{var}` that {label} captures", depth + 1)
        if diff is not None:
            return diff
    return (_compare(f.__defaults__, g.__defaults__, f"{label}'s default arguments", depth + 1)
            or _compare(f.__kwdefaults__, g.__kwdefaults__, f"{label}'s keyword defaults", depth + 1))


def _full(cell) -> bool:
    try:
        cell.cell_contents
        return True
    except ValueError:
        return False
