"""The consumer side of the service: a source node whose elements come from the service's workers.

Streaming modes (``parallel_epochs`` and the static sharding policies): each live worker runs its stream of
the job; the consumer keeps one request for a block of elements outstanding per worker (backpressure: at
most ``max_outstanding_requests`` blocks in flight) and takes the blocks in worker order. A dead worker's
stream ends where it died (these modes promise nothing for it, as in tf.data). With coordinated reads
(``consumer_index``/``num_consumers``) round ``r`` is served by worker ``r % workers``, and every consumer
gets its element of the same round.

``distributed_epoch``: the consumer asks the dispatcher for splits and has workers process them, at most
``max_outstanding_requests`` at a time. A split's elements are accepted as a unit, when the whole split has
arrived: a split whose worker dies is processed again, on another worker, and nothing of it was delivered
before -- so every split is delivered exactly once to this consumer, whatever fails. With deterministic
order (the default; ``Options.deterministic=False`` lifts it) splits are delivered in the order they were
handed out: one consumer alone on its job gets the elements of split 0, 1, 2, ... whatever the number and
speed of the workers (the cost: a slow split holds back those after it).

State (``get_state``): for ``distributed_epoch``, the ledger -- the splits delivered and the position in the
split being read; for the streaming modes, how many elements each worker's stream has delivered. A state
restores only into the same dataset (its id is a digest of the pickled graph), mode and worker count;
jobs shared by name with other consumers cannot be saved (their position depends on the others).
"""

from __future__ import annotations

import collections

from jaxfeed.pipeline.engine.registry import builds
from jaxfeed.pipeline.errors import FailedPreconditionError, InvalidArgumentError, UnavailableError
from jaxfeed.pipeline.iterators.base import BlockIterator
from jaxfeed.pipeline.nodes.base import UNKNOWN, Node
from jaxfeed.pipeline.options import effective_deterministic

from .actors import unpack_block
from .cluster import WorkerLost, connect
from .modes import STATIC, ShardingPolicy

BLOCK = 64  # elements per streaming request


class ServiceSource(Node):
    kind = "ServiceDataset"
    is_source = True

    def __init__(self, handle, dataset_id: str, graph_bytes: bytes, element_spec, policy: ShardingPolicy,
                 job_name=None, consumer_index=None, num_consumers=None, max_outstanding_requests=None,
                 split_plan=None):
        super().__init__()
        self.handle = handle  # runtime: actor handles (not a param)
        self.dataset_id = dataset_id
        self.graph_bytes = graph_bytes
        self.spec = element_spec
        self.policy = ShardingPolicy(policy)
        self.job_name = job_name
        self.consumer_index = consumer_index
        self.num_consumers = num_consumers
        self.max_outstanding_requests = max_outstanding_requests
        self.split_plan = split_plan

    def params(self):
        return {"dataset_id": self.dataset_id, "processing_mode": self.policy.name, "job_name": self.job_name,
                "consumer_index": self.consumer_index, "num_consumers": self.num_consumers}

    def compute_spec(self):
        return self.spec

    def cardinality(self):
        return UNKNOWN

    def remote_dataset(self):
        """The dataset the workers run (for the determinism checker, which looks across the boundary)."""
        import cloudpickle

        return cloudpickle.loads(self.graph_bytes)


class _Consumer(BlockIterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.handle = connect(node.handle)
        self._started = False
        self._restored = None

    def _job(self, num_splits=0, done=()):
        job = self.handle.get(self.handle.dispatcher.job.remote(
            self.node.dataset_id, self.node.job_name, int(self.node.policy), num_splits, list(done)), "creating the job")
        return job["key"]

    def _check_state(self, state, mode):
        if not isinstance(state, dict) or state.get("mode") != mode or state.get("dataset_id") != self.node.dataset_id:
            raise InvalidArgumentError(f"{self.node.label()}: the state was saved by another service job (another "
                                       "dataset or processing mode); refusing to restore.", "service")

    def _no_shared_state(self):
        if self.node.job_name is not None:
            raise FailedPreconditionError(f"{self.node.label()}: a job shared by name ({self.node.job_name!r}) "
                                          "cannot be saved: its position depends on its other consumers.", "service")

    def set_state(self, state):
        self._restored = state


class StreamConsumer(_Consumer):
    def _start(self):
        node = self.node
        self._workers = self.handle.live_workers()
        if not self._workers:
            raise UnavailableError(f"{node.label()}: the service has no live workers.", "service")
        self._key = self._job()
        count = len(self._workers)
        self._shards = {w: None if node.policy == ShardingPolicy.OFF else (count, i, int(STATIC[node.policy]))
                        for i, w in enumerate(self._workers)}
        self._consumed = {w: 0 for w in self._workers}
        self._turn, self._round = 0, 0
        if self._restored is not None:
            state = self._restored
            self._check_state(state, "stream")
            if state["workers"] != count:
                raise InvalidArgumentError(f"{node.label()}: the state was saved with {state['workers']} workers, "
                                           f"the service has {count}; refusing to restore.", "service")
            self._consumed = dict(zip(self._workers, state["consumed"]))
            self._turn, self._round = state["turn"], state["round"]
            ended = {self._workers[i] for i in state.get("ended", [])}
        self.handle.get([self.handle.workers[w].open_stream.remote(
            self._key, node.dataset_id, node.graph_bytes, self._shards[w], self._consumed[w])
            for w in self._workers], "opening the workers' streams")
        self._pending = {}  # worker -> ref of its next block
        self._buffer = collections.deque()  # (worker, element) of the block being delivered
        self._ended: set = ended if self._restored is not None else set()
        self._started = True

    def _request(self, w):
        if w not in self._pending and w not in self._ended:
            self._pending[w] = self.handle.workers[w].next_block.remote(self._key, self._shards[w], BLOCK)

    def _next_many(self, n):
        if not self._started:
            self._start()
        if self.node.num_consumers is not None:
            return self._coordinated(n)
        out = []
        while len(out) < n:
            if self._buffer:
                w, element = self._buffer.popleft()
                self._consumed[w] += 1
                out.append(element)
                continue
            live = [w for w in self._workers if w not in self._ended]
            if not live:
                break
            limit = self.node.max_outstanding_requests or len(live)
            for w in live[:max(limit, 1)]:
                self._request(w)
            w = live[self._turn % len(live)]
            self._request(w)
            try:
                block = unpack_block(self.handle.get(self._pending.pop(w), "reading a block", worker=w))
            except WorkerLost:
                self.handle.get(self.handle.dispatcher.remove_worker.remote(w), "reporting a dead worker")
                self._ended.add(w)
                continue
            if not block:
                self._ended.add(w)
                continue
            self._turn += 1
            self._buffer.extend((w, e) for e in block)
        return out

    def _coordinated(self, n):
        node = self.node
        out = []
        while len(out) < n:
            w = self._workers[self._round % len(self._workers)]
            try:
                element = self.handle.get(self.handle.workers[w].take_round.remote(
                    self._key, self._shards[w], self._round, node.consumer_index, node.num_consumers),
                    "reading a round", worker=w)
            except WorkerLost as e:
                raise UnavailableError(f"{node.label()}: worker {e.index} died; coordinated reads cannot go on "
                                       "without it (every consumer's round must come from one worker).",
                                       "service") from None
            if element is None:
                break
            self._round += 1
            out.append(element)
        return out

    def get_state(self):
        self._no_shared_state()
        if not self._started:
            self._start()
        # a block being delivered was counted as a turn when it arrived; a restore reads its rest first
        turn = self._turn - 1 if self._buffer else self._turn
        return {"mode": "stream", "dataset_id": self.node.dataset_id, "workers": len(self._workers),
                "consumed": [self._consumed[w] for w in self._workers], "turn": turn, "round": self._round,
                "ended": [i for i, w in enumerate(self._workers) if w in self._ended]}

    def close(self):
        if self._started:
            for w in self._workers:
                if w not in self._ended:
                    try:
                        self.handle.workers[w].close_stream.remote(self._key, self._shards[w])
                    except Exception:  # noqa: BLE001 - the service may be gone already
                        pass
            self._started = False
        super().close()


class SplitConsumer(_Consumer):
    def _start(self):
        node = self.node
        self._workers = self.handle.live_workers()
        if not self._workers:
            raise UnavailableError(f"{node.label()}: the service has no live workers.", "service")
        self._in_order = effective_deterministic(self.ctx.options, None)
        done, self._skip, first = [], 0, None
        self._skip_split = None
        if self._restored is not None:
            state = self._restored
            self._check_state(state, "splits")
            if state["num_splits"] != node.split_plan["count"]:
                raise InvalidArgumentError(f"{node.label()}: the state has {state['num_splits']} splits, this "
                                           f"dataset {node.split_plan['count']}; refusing to restore.", "service")
            done = list(state["done"])
            if state["current"] is not None:
                first, self._skip = state["current"]
                self._skip_split = first
                done.append(first)  # processed here first, never handed to anyone else
        self._key = self._job(node.split_plan["count"], done)
        self._done = sorted(set(state["done"])) if self._restored is not None else []
        self._flight = collections.OrderedDict()  # split -> (worker, ref), in hand-out order
        self._next_worker = 0
        self._exhausted = False
        self._current = None  # split being delivered
        self._buffer = collections.deque()
        self._offset = 0
        if first is not None:
            self._submit(first)
        self._started = True

    def _pick_worker(self) -> int:
        if not self._workers:
            raise UnavailableError(f"{self.node.label()}: every worker of the service died.", "service")
        w = self._workers[self._next_worker % len(self._workers)]
        self._next_worker += 1
        return w

    def _submit(self, split, worker=None):
        w = self._pick_worker() if worker is None else worker
        ref = self.handle.workers[w].process_split.remote(self.node.dataset_id, self.node.graph_bytes,
                                                           self.node.split_plan, split)
        self._flight[split] = (w, ref)

    def _fill(self):
        limit = self.node.max_outstanding_requests or 2 * len(self._workers)
        while not self._exhausted and len(self._flight) < max(limit, 1):
            w = self._pick_worker()
            split = self.handle.get(self.handle.dispatcher.next_split.remote(self._key, w), "asking for a split")
            if split is None:
                self._exhausted = True
                break
            self._submit(split, w)

    def _receive(self):
        """The elements of one split (the oldest in flight, or the first finished), retried on worker loss."""
        import ray

        while True:
            if self._in_order:
                split = next(iter(self._flight))
            else:
                refs = {ref: s for s, (_, ref) in self._flight.items()}
                ready, _ = ray.wait(list(refs), num_returns=1)
                split = refs[ready[0]]
            w, ref = self._flight[split]
            try:
                elements = unpack_block(self.handle.get(ref, f"processing split {split}", worker=w))
            except WorkerLost:
                self._workers = [x for x in self._workers if x != w]
                self.handle.get(self.handle.dispatcher.remove_worker.remote(w), "reporting a dead worker")
                self._submit(split)  # another worker; an OrderedDict keeps the split's place in the order
                continue
            del self._flight[split]
            self.handle.dispatcher.complete.remote(self._key, split)
            return split, elements

    def _next_many(self, n):
        if not self._started:
            self._start()
        out = []
        while len(out) < n:
            if self._buffer:
                take = min(n - len(out), len(self._buffer))
                out.extend(self._buffer.popleft() for _ in range(take))
                self._offset += take
                if not self._buffer:
                    self._done.append(self._current)
                    self._current = None
                continue
            self._fill()
            if not self._flight:
                break
            split, elements = self._receive()
            skip = self._skip if split == self._skip_split else 0  # the restored split: what was read already
            self._current, self._offset = split, skip
            self._buffer = collections.deque(elements[skip:])
            if not self._buffer:
                self._done.append(split)
                self._current = None
        return out

    def get_state(self):
        self._no_shared_state()
        if not self._started:
            self._start()
        return {"mode": "splits", "dataset_id": self.node.dataset_id, "num_splits": self.node.split_plan["count"],
                "done": sorted(self._done),
                "current": None if self._current is None else [self._current, self._offset]}

    def close(self):
        if self._started:
            self._flight.clear()  # results still being computed are dropped with their refs
            self._started = False
        super().close()


@builds(ServiceSource)
def service_consumer(node, ctx):
    """Splits handed out by the dispatcher under DYNAMIC sharding; else a stream from every worker."""
    if node.policy == ShardingPolicy.DYNAMIC:
        return SplitConsumer(node, ctx)
    return StreamConsumer(node, ctx)
