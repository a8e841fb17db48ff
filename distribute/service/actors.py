"""The service's Ray actors, as plain classes (``cluster.py`` wraps them with ``ray.remote``).

``Dispatcher`` (one per service, a named actor): the registered datasets (pickled graphs, by id), the
workers, and each job's split ledger for ``distributed_epoch`` -- splits not yet handed out, handed out
(in flight, with the worker), completed. A split whose worker died goes back to the front of the queue.

``Worker`` (N per service): runs jaxfeed pipelines with jaxfeed's own engine. For streaming modes it keeps
one iterator per (job, worker shard) and hands out blocks of elements; for ``distributed_epoch`` it
processes a whole split per call and returns its elements, which the consumer accepts as a unit (so a
split is delivered exactly once even when a worker dies part way: see ``source.py``).

Elements travel as Python lists of numpy values through Ray's object store (arrays out of band: no copy
into the pickle stream).
"""

from __future__ import annotations

import collections
import hashlib
import itertools


def pack_block(elements: list):
    """A block for the object store: elements of one structure and shapes as stacked arrays (one buffer per
    leaf, shipped without copies), others as the list itself."""
    from jaxfeed.pipeline import structure
    from jaxfeed.pipeline.errors import InvalidArgumentError

    if len(elements) > 1:
        try:
            return ("stacked", len(elements), structure.stack(elements, what="service block"))
        except (InvalidArgumentError, TypeError, ValueError):
            pass
    return ("list", len(elements), elements)


def unpack_block(block) -> list:
    from jaxfeed.pipeline import structure

    kind, n, payload = block
    return structure.unstack_rows(payload, n) if kind == "stacked" else payload


class Dispatcher:
    def __init__(self):
        self._datasets: dict[str, bytes] = {}
        self._workers: list = []
        self._jobs: dict[str, dict] = {}
        self._anonymous = itertools.count()

    # ------------------------------------------------------------------ datasets and workers
    def register_dataset(self, graph_bytes: bytes, dataset_id: str | None = None) -> str:
        if dataset_id is None:
            dataset_id = "ds-" + hashlib.blake2b(graph_bytes, digest_size=10).hexdigest()
        previous = self._datasets.get(dataset_id)
        if previous is not None and previous != graph_bytes:
            raise ValueError(f"dataset id {dataset_id!r} is registered with another dataset")
        self._datasets[dataset_id] = graph_bytes
        return dataset_id

    def dataset(self, dataset_id: str) -> bytes:
        if dataset_id not in self._datasets:
            raise KeyError(f"no dataset registered with id {dataset_id!r}")
        return self._datasets[dataset_id]

    def add_workers(self, handles: list) -> None:
        self._workers.extend(handles)

    def workers(self) -> list:
        return list(self._workers)

    def remove_worker(self, index: int) -> None:
        """A consumer saw this worker die: it gets no more work (its slot stays, so indices are stable)."""
        if 0 <= index < len(self._workers):
            self._workers[index] = None

    # ------------------------------------------------------------------ jobs
    def job(self, dataset_id: str, job_name: str | None, mode: int, num_splits: int, done=()) -> dict:
        """The job (created on first use): ``{"key", "created"}``. A named job is shared by every consumer
        that names it; an unnamed one belongs to its caller alone."""
        if dataset_id not in self._datasets:
            raise KeyError(f"no dataset registered with id {dataset_id!r}")
        key = f"{dataset_id}/{job_name}" if job_name is not None else f"{dataset_id}/anonymous-{next(self._anonymous)}"
        job = self._jobs.get(key)
        created = job is None
        if created:
            done = set(int(s) for s in done)
            job = self._jobs[key] = {"dataset": dataset_id, "mode": int(mode), "num_splits": int(num_splits),
                                     "todo": collections.deque(s for s in range(num_splits) if s not in done),
                                     "in_flight": {}, "done": done}
        elif job["dataset"] != dataset_id or job["mode"] != int(mode):
            raise ValueError(f"job {job_name!r} exists for another dataset or processing mode")
        return {"key": key, "created": created}

    def next_split(self, key: str, worker: int):
        """The next split for ``worker`` to process, or None when none is left to hand out."""
        job = self._jobs[key]
        if not job["todo"]:
            return None
        split = job["todo"].popleft()
        job["in_flight"][split] = worker
        return split

    def requeue(self, key: str, split: int) -> None:
        """A split whose worker failed goes back to the front: it is handed out again first."""
        job = self._jobs[key]
        if job["in_flight"].pop(split, None) is not None and split not in job["done"]:
            job["todo"].appendleft(split)

    def complete(self, key: str, split: int) -> None:
        job = self._jobs[key]
        job["in_flight"].pop(split, None)
        job["done"].add(split)

    def ledger(self, key: str) -> dict:
        job = self._jobs[key]
        return {"todo": list(job["todo"]), "in_flight": dict(job["in_flight"]), "done": sorted(job["done"])}

    def ping(self) -> bool:
        return True


class Worker:
    def __init__(self, index: int):
        self.index = index
        self._graphs: dict[str, object] = {}  # dataset id -> Dataset (unpickled once)
        self._streams: dict[tuple, object] = {}  # (job key, stream) -> iterator
        self._rounds: dict[tuple, dict] = {}  # coordinated reads: (job, stream) -> {round: [elements]}

    def _dataset(self, dataset_id: str, graph_bytes: bytes):
        ds = self._graphs.get(dataset_id)
        if ds is None:
            import cloudpickle

            ds = self._graphs[dataset_id] = cloudpickle.loads(graph_bytes)
        return ds

    # ------------------------------------------------------------------ streaming modes
    def open_stream(self, job_key: str, dataset_id: str, graph_bytes: bytes, shard: tuple | None,
                    skip: int = 0) -> bool:
        """Start (once) this worker's iterator for a job: the whole dataset, or ``auto_shard``'s shard
        ``(num_workers, index, policy)``; ``skip`` elements are dropped first (a restored consumer)."""
        key = (job_key, shard)
        if key in self._streams:
            return False
        ds = self._dataset(dataset_id, graph_bytes)
        if shard is not None:
            from jaxfeed.distribute.auto_sharding import auto_shard
            from jaxfeed.pipeline.options import AutoShardPolicy, Options

            num, index, policy = shard
            options = Options()
            options.experimental_distribute.auto_shard_policy = AutoShardPolicy(policy)
            ds = auto_shard(ds.with_options(options), num, index)
        it = iter(ds.skip(skip) if skip else ds)
        self._streams[key] = it
        return True

    def next_block(self, job_key: str, shard: tuple | None, n: int):
        it = self._streams[(job_key, shard)]
        return pack_block(it.next_many(n))

    def take_round(self, job_key: str, shard: tuple | None, round_index: int, consumer: int,
                   num_consumers: int):
        """Coordinated reads: round ``round_index`` is ``num_consumers`` consecutive elements of this worker's
        stream; consumer ``c`` gets the ``c``-th. None when the stream ended before the round was whole."""
        rounds = self._rounds.setdefault((job_key, shard), {})
        entry = rounds.get(round_index)
        if entry is None:
            it = self._streams[(job_key, shard)]
            elements = []
            while len(elements) < num_consumers:
                block = it.next_many(num_consumers - len(elements))
                if not block:
                    break
                elements.extend(block)
            entry = rounds[round_index] = {"elements": elements if len(elements) == num_consumers else None,
                                           "taken": set()}
        entry["taken"].add(consumer)
        out = None if entry["elements"] is None else entry["elements"][consumer]
        if len(entry["taken"]) == num_consumers:
            del rounds[round_index]
        return out

    def close_stream(self, job_key: str, shard: tuple | None) -> None:
        it = self._streams.pop((job_key, shard), None)
        if it is not None:
            it.close()

    # ------------------------------------------------------------------ distributed_epoch
    def process_split(self, dataset_id: str, graph_bytes: bytes, split_plan: dict, split: int) -> list:
        """Every element the dataset makes of split ``split`` (a unit: the consumer accepts all or none)."""
        from . import splits

        ds = splits.restrict(self._dataset(dataset_id, graph_bytes), split_plan, split)
        with iter(ds) as it:
            out = []
            for block in iter(lambda: it.next_many(1024), []):
                out.extend(block)
        return pack_block(out)

    def ping(self) -> int:
        return self.index
