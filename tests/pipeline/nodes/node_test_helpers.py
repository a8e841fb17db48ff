"""Small helpers the node tests share: elements as Python values, the same elements through a node that is
not random-access, and strict equality of elements."""

import math

import numpy as np


def values(ds):
    return [np.asarray(x).tolist() for x in ds]


def ints(ds):
    return [int(x) for x in ds]


def streaming(ds):
    """The same elements through a node that is not random-access."""
    return ds.filter(lambda *_: True)


def same(a, b) -> bool:
    """Equal as elements or batches: same types all the way down, dict key order, dtypes, shapes and values
    (NaN equal to NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
    if isinstance(a, (np.generic, float)) and getattr(a, "dtype", np.dtype(float)).kind in "fc":
        return (a == b) or (math.isnan(abs(a)) and math.isnan(abs(b)))
    return a == b


def recording_addresses():
    """``(made, fresh)``: ``fresh(array)`` returns the array and records its memory's address in ``made``, so a
    test can tell whether what came out is that array or a copy, without holding a reference to it."""
    made = []

    def fresh(x):
        made.append(x.ctypes.data)
        return x

    return made, fresh
