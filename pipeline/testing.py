"""Shared harnesses for properties every pipeline must have (used by jaxfeed's tests; usable by yours).

- ``assert_elements_equal(a, b)``: two element lists are equal leaf by leaf (dtype, shape, bytes).
- ``assert_resumes_everywhere(make)``: saving after k elements and restoring into a fresh iterator of a
  freshly built pipeline continues exactly like the uninterrupted run -- for every k, end included.
- ``assert_same_after_rewrites(ds)``: the rewritten graph yields exactly what the plain graph yields.
"""

from __future__ import annotations

import pickle
from typing import Callable

import numpy as np

from . import structure
from .options import Options


def to_python(element):
    """A comparable form of an element: leaves become (dtype, shape, bytes) or the bytes value itself."""
    def leaf(x):
        if isinstance(x, bytes):
            return ("bytes", x)
        if hasattr(x, "_node"):  # a window: compare its elements
            return ("dataset", [to_python(e) for e in x])
        arr = np.asarray(x)
        if arr.dtype == object:
            return ("object", arr.shape, [bytes(v) if isinstance(v, (bytes, bytearray)) else v
                                          for v in arr.reshape(-1).tolist()])
        return (arr.dtype.str, arr.shape, arr.tobytes())

    return structure.describe(element), [leaf(x) for x in structure.flatten(element)]


def assert_elements_equal(actual, expected, what: str = "elements"):
    actual, expected = list(actual), list(expected)
    for i, (a, e) in enumerate(zip(actual, expected)):
        if to_python(a) != to_python(e):
            raise AssertionError(f"{what}: element {i} differs:\n  got      {a!r}\n  expected {e!r}")
    if len(actual) != len(expected):
        raise AssertionError(f"{what}: got {len(actual)} elements, expected {len(expected)}")


def assert_resumes_everywhere(make: Callable[[], object], ks=None, roundtrip: bool = True,
                              max_elements: int = 10_000):
    """For each k (default: every k from 0 to the end), read k elements, save, restore into a fresh
    iterator of ``make()``, read the rest; the concatenation must equal the uninterrupted run.
    With ``roundtrip``, the state also goes through pickle (what a checkpoint file holds)."""
    expected = []
    it = iter(make())
    for element in it:
        expected.append(element)
        if len(expected) > max_elements:
            raise AssertionError(f"pipeline produced more than {max_elements} elements; pass a finite one")
    it.close()
    ks = range(len(expected) + 1) if ks is None else ks
    for k in ks:
        first = iter(make())
        head = [next(first) for _ in range(k)]
        state = first.get_state()
        first.close()
        if roundtrip:
            state = pickle.loads(pickle.dumps(state))
        restored = make().make_iterator(state=state)
        tail = list(restored)
        restored.close()
        assert_elements_equal(head + tail, expected, what=f"resume after {k} elements")
    return expected


def assert_same_after_rewrites(dataset, options: Options | None = None):
    """The graph the passes produce yields exactly what the plain graph yields."""
    plain = Options()
    plain.experimental_optimization.apply_default_optimizations = False
    expected = list(dataset.with_options(plain))
    actual = list(dataset.with_options(options) if options is not None else dataset)
    assert_elements_equal(actual, expected, what="rewritten vs plain graph")
    return actual
