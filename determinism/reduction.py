"""Reductions in a fixed order, for ``MirroredStrategy.reduce`` / ``all_reduce`` under determinism.

Floating-point addition is not associative, so a sum is reproducible bit for bit only if its order is
fixed. Three tools, from the cheapest guarantee to the strongest:

- ``ordered_sum(values)`` / ``ordered_mean``: per-replica values (a list, replica 0 first) added in one
  fixed pairwise tree over the replica index. Identical across runs with the same number of replicas.
  It is ``jaxfeed.distribute.ordered``'s, the order every strategy reduction over replicas uses.
- ``psum_in_order(x, axis_name)``: inside ``shard_map``/``pmap``, ``lax.all_gather`` then the same fixed
  tree. The collective only moves data, so the result does not depend on the collective's algorithm
  (ring, tree, NCCL's choice): identical across runs on every platform, and the same on every replica.
- ``sum_over_batch(shards, axis=0)``: when the values are per *example* (the shards are consecutive slices
  of one global batch), concatenate them in replica order and reduce the global array at once. The
  result depends only on the global batch, so it is bitwise identical across 1, 2 or 8 devices.

Where the maths does not allow identity across device counts: an ``all_reduce`` of per-replica values
that are themselves partial sums (each replica's gradient summed over its own slice of the batch) rounds
differently when the slices change, so 1, 2 and 8 devices can differ in the last bits even though each
device count is reproducible run to run. To be identical across device counts, reduce per-example values
with ``sum_over_batch`` (or ``psum_in_order`` over a ``vmap``-ed per-example quantity gathered in order).
"""

from __future__ import annotations

import numpy as np

# one implementation of the fixed order, shared with MirroredStrategy's all_reduce and reduce
from jaxfeed.distribute.ordered import ordered_sum, psum_in_order  # noqa: F401  (re-exported)


def ordered_mean(values):
    values = list(values)
    return ordered_sum(values) / len(values)


def pmean_in_order(x, axis_name):
    from jax import lax

    return psum_in_order(x, axis_name) / lax.psum(1, axis_name)


def sum_over_batch(shards, axis: int = 0):
    """Sum over the global batch of per-example values split across replicas (shards in replica order).
    The same global batch gives the same bits whatever the number of shards."""
    arrays = [np.asarray(s) for s in shards]
    whole = np.concatenate(arrays, axis=axis) if len(arrays) > 1 else arrays[0]
    return np.sum(whole, axis=axis)


def mean_over_batch(shards, axis: int = 0):
    arrays = [np.asarray(s) for s in shards]
    whole = np.concatenate(arrays, axis=axis) if len(arrays) > 1 else arrays[0]
    return np.sum(whole, axis=axis) / whole.shape[axis]
