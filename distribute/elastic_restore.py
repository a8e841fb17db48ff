"""Elastic resume of a distributed dataset: W workers' saved states -> an iterator for this job's workers.

Supported: datasets from ``experimental_distribute_dataset`` under DATA auto-sharding (AUTO falling back to
DATA included) with the legacy split, over a global dataset G that ``jaxfeed.pipeline.elastic`` supports
(deterministic, random-access sources); the others are refused with its errors. Each step of such a job
consumes exactly one global batch of G (the W x R pieces of one batch), so a state saved at step S by every
worker says: the first S global batches are consumed. The new job's workers read
``elastic.worker_dataset(G, 1, 0, global_state)`` (G from batch S on, skipped by index arithmetic over index
streams), split for this strategy. A job restored this way can be resumed elastically again (its states carry
the global state it started from).
"""

from __future__ import annotations

from jaxfeed.pipeline.errors import InvalidArgumentError

from .distributed_dataset import DistributedDataset
from .distributed_iterator import STATE_VERSION
from .feed import InputFeed


def restore_elastic(dds: DistributedDataset, states):
    """``dds.restore_elastic(states)``: each saved state is checked against the graph its worker ran (rebuilt
    from its layout), then the global batches the job consumed are skipped."""
    from jaxfeed.pipeline import checkpoint, elastic
    from jaxfeed.pipeline.options import AutoShardPolicy
    from jaxfeed.pipeline.errors import FailedPreconditionError

    what = "DistributedDataset.restore_elastic"
    if dds._source is None:
        raise InvalidArgumentError(f"{what}: only datasets from experimental_distribute_dataset can be restored "
                                   "elastically (distribute_datasets_from_function builds its own pipelines).",
                                   what)
    if dds.decision.applied != AutoShardPolicy.DATA or dds._options.split == "balanced":
        raise FailedPreconditionError(
            f"{what}: elastic resume needs DATA auto-sharding with the legacy split (every step then consumes "
            f"one global batch); this dataset uses {dds.decision.applied.name}"
            f"{' with split=balanced' if dds._options.split == 'balanced' else ''}. Set "
            "Options().experimental_distribute.auto_shard_policy = AutoShardPolicy.DATA.", what)
    G = dds._source
    elastic.check_supported(G)
    states = [checkpoint.deserialize(x) if isinstance(x, (bytes, bytearray, memoryview)) else x
              for x in states]
    if not states:
        raise InvalidArgumentError(f"{what}: no worker states given.", what)
    for i, st_ in enumerate(states):
        if not isinstance(st_, dict) or st_.get("version") != STATE_VERSION or "layout" not in st_:
            raise InvalidArgumentError(f"{what}: state {i} is not a distributed iterator state of an "
                                       "experimental_distribute_dataset iterator.", what)
    previous = states[0].get("elastic")
    steps = sorted({int(x["step"]) for x in states})
    if len(steps) > 1 or any(x.get("elastic") != previous for x in states):
        raise FailedPreconditionError(f"{what}: the workers' states are from different steps {steps} (or "
                                      "different restores); save every worker at the same step.", what)
    iterations = {int(x["workers"][0].get("iteration", 0)) for x in states}
    if len(iterations) > 1:
        raise FailedPreconditionError(f"{what}: the workers were in different epochs of the dataset "
                                      f"(iteration keys {sorted(iterations)}).", what)
    started = G if previous is None else elastic.worker_dataset(G, 1, 0, previous)
    workers = len(states)
    for i, st_ in enumerate(states):
        n, w_count, w_index = (st_["layout"][k] for k in ("replicas", "num_workers", "worker"))
        if (w_count, w_index) != (workers, i):
            raise FailedPreconditionError(
                f"{what}: state {i} was saved by worker {w_index} of {w_count}; pass the {w_count} workers' "
                "states in worker order.", what)
        expected = DistributedDataset.from_dataset(InputFeed.layout(n, w_count, w_index), started, dds._options)
        if st_["workers"][0].get("fingerprint") != expected._datasets[0].fingerprint():
            where = checkpoint.describe_difference(st_["workers"][0].get("nodes"), expected._datasets[0]._node)
            raise FailedPreconditionError(f"{what}: the state of worker {i} is not from this pipeline ({where}).",
                                          what)
    # G-level positions: the job consumed the first `steps[0]` batches of what it started from
    holes = list((previous or {}).get("holes", []))
    frontier = int((previous or {}).get("frontier", 0))
    consumed = steps[0]
    taken = min(consumed, len(holes))
    holes, frontier = holes[taken:], frontier + (consumed - taken)
    global_state = {"kind": elastic.GLOBAL_STATE_KIND, "version": elastic.GLOBAL_STATE_VERSION,
                    "fingerprint": G.fingerprint(), "nodes": checkpoint.graph_signature(G._node),
                    "iteration": iterations.pop(), "frontier": frontier, "holes": holes}
    rest = elastic.worker_dataset(G, 1, 0, global_state)
    new = DistributedDataset.from_dataset(dds._feed, rest, dds._options)
    new._source, new._elastic = G, global_state
    new._datasets[0]._iterations = int(global_state["iteration"])  # the saved epoch's shuffle order
    return iter(new)

