"""Sums over replicas in one fixed order: a pairwise tree over the replica index.

Floating-point addition is not associative, so a sum is reproducible bit for bit only if its order is
fixed. Every sum over replicas in jaxfeed uses this one order: ``all_reduce`` inside ``run``
(``psum_in_order``), ``strategy.reduce(..., axis=None)`` on the host and inside ``merge_call``, a
non-distributed value reduced as if ``run`` had broadcast it (``ordered_sum``), and
``jaxfeed.determinism``'s ``ordered_sum`` / ``psum_in_order``, which are these functions.

The tree: ``((v0 + v1) + (v2 + v3)) + ...``, pairs of neighbours level by level, an odd one out carried to
the next level. Why a tree rather than adding left to right: its rounding error grows with log2(R), not
with R, and it is the order ``jaxfeed.determinism`` documented and its tests pin.

No JAX at import: ``psum_in_order`` imports ``jax.lax`` when called (inside ``shard_map``).
"""

from __future__ import annotations


def ordered_sum(values):
    """Sum of per-replica values (numpy or JAX arrays of one shape, replica 0 first) in the fixed tree."""
    values = list(values)
    if not values:
        raise ValueError("ordered_sum: no values to reduce")
    while len(values) > 1:
        paired = [values[i] + values[i + 1] for i in range(0, len(values) - 1, 2)]
        if len(values) % 2:
            paired.append(values[-1])
        values = paired
    return values[0]


def psum_in_order(x, axis_name):
    """``lax.psum`` with the fixed order: all-gather the replicas' values, then ``ordered_sum``. The
    collective only moves data, so the result does not depend on its algorithm (ring, tree, NCCL's
    choice): the same bits on every replica and in every run. Use inside ``shard_map`` / ``pmap``
    (``axis_name`` is the replica axis)."""
    from jax import lax

    gathered = lax.all_gather(x, axis_name)  # (replicas, ...) in replica order, on every replica
    return ordered_sum(gathered[i] for i in range(gathered.shape[0]))
