"""Small helpers the node tests share: elements as Python values, and the same elements through a node that is
not random-access."""

import numpy as np


def values(ds):
    return [np.asarray(x).tolist() for x in ds]


def ints(ds):
    return [int(x) for x in ds]


def streaming(ds):
    """The same elements through a node that is not random-access."""
    return ds.filter(lambda *_: True)
