"""What a distributed dataset knows statically: the global batch size and one replica's element spec.

No JAX here: these read the graph's nodes (their declared ``batches_of()`` and ``keeps_batch_dim``) and
element specs only.
"""

from __future__ import annotations

from jaxfeed.pipeline import structure as st


def static_batch_size(node) -> int:
    """tf.distribute's ``compute_batch_size``: the common static leading dimension, else the batch size of
    the nearest batching node upstream through nodes that keep the batch dimension (map, filter, shuffle,
    prefetch, ...), else -1. Raises ValueError for unbatched scalar elements."""
    leaves = st.flatten(node.element_spec)
    if any(getattr(s, "shape", None) == () for s in leaves):
        raise ValueError("experimental_distribute_dataset: the dataset's elements have scalar components "
                         f"({node.element_spec!r}); the dataset must yield global batches: call batch() first")
    dims = {s.shape[0] for s in leaves if getattr(s, "shape", None)}
    if len(dims) == 1 and None not in dims:
        return int(dims.pop())
    cur = node
    while cur is not None:
        size = cur.batches_of()
        if size is not None:
            return int(size)
        if not cur.keeps_batch_dim or not cur.inputs:
            return -1
        cur = cur.inputs[0]
    return -1


def refuse_composites(element_spec) -> None:
    """Ragged and sparse batches have no per-replica array form: a clear TypeError, not numpy's."""
    from jaxfeed.pipeline.ragged import RaggedSpec, SparseSpec

    for path, leaf in st.iter_structure_paths(element_spec):
        if isinstance(leaf, (RaggedSpec, SparseSpec)):
            raise TypeError(f"component {path} is {'ragged' if isinstance(leaf, RaggedSpec) else 'sparse'} "
                            f"({leaf!r}): distribution splits dense arrays over replicas; pad it (padded_batch) "
                            "or convert it (to_list(), to_dense()) in the pipeline first.")


def per_replica_spec(spec, global_batch: int, num_replicas: int, split: bool):
    """One replica's element spec when global batches of ``global_batch`` rows (-1: unknown) are split over
    ``num_replicas``: the leading dimension stays known only when the split is even."""
    if not split:
        return spec
    even = global_batch > 0 and global_batch % num_replicas == 0

    def one(s):
        if not getattr(s, "shape", None):
            return s
        lead = s.shape[0]
        return s.unbatched().with_leading(global_batch // num_replicas if (even and lead is not None) else None)

    return st.map_structure(one, spec)


def fully_static(spec) -> bool:
    """tf.distribute's ``_is_statically_shaped`` of a per-replica spec: every dimension known."""
    leaves = st.flatten(spec)
    return bool(leaves) and all(getattr(x, "shape", None) is not None and None not in x.shape for x in leaves)
