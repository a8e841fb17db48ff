"""``MultiWorkerMirroredStrategy``: synchronous data parallelism over every device of every worker process.

Joining: the resolver (``TFConfigClusterResolver`` by default) gives the collective group, chief first then
the workers; this task's position is its JAX process id and the first task's address is the coordinator of
``jax.distributed.initialize`` (the other addresses in TF_CONFIG are not used: JAX's own collectives connect
the processes). On CPU, JAX's gloo collectives carry ``psum``/``all_gather`` between processes.

Replicas are all devices of all processes, in process order. Distributed datasets are sharded across workers
with the auto-shard policy, then split across each worker's local devices.

Timeouts (what users see when a peer dies or never arrives):
- ``initialization_timeout`` (default 300 s): before JAX joins the processes, the tasks meet on their TF_CONFIG
  addresses (``cluster.rendezvous``); a task that never arrives makes ``MultiWorkerMirroredStrategy()`` raise
  ``TimeoutError`` on the others, naming the missing task and its address.
- ``step_timeout`` (default 300 s; raise it for pipelines that need longer for one step, e.g. to fill a
  large shuffle buffer): distributed iterators agree on every step (whether any worker still has
  data, and every replica's batch size) through the coordination service; a worker that does not report
  within the timeout makes the others raise ``TimeoutError`` naming the worker and the step.
- ``heartbeat_timeout`` (default 30 s): JAX's coordination service declares a silent peer dead after this
  long; JAX then terminates the surviving processes with a fatal "detected fatal errors" / heartbeat message
  (JAX's own behaviour, which cannot be caught from Python). A collective whose peer process has exited
  fails at once with gloo's connection error.

``ps`` and ``evaluator`` tasks do not join the group: on them the strategy exposes ``cluster_resolver`` and
``num_replicas_in_sync`` of the group, and they can build datasets, models and read checkpoints (for an
evaluator: with its own ``MirroredStrategy``); collective calls (``run``, ``reduce``, distributing datasets or
values, creating mirrored variables) raise ``RuntimeError``.
"""

from __future__ import annotations

import time

from . import lifetime
from .cluster import COLLECTIVE_TYPES, TFConfigClusterResolver, rendezvous
from .mirrored import MeshStrategy

KV_PREFIX = "jaxfeed/distribute"
_REPORT_SLICE_MS = 250  # how often a wait for a peer's step report looks whether the interpreter is exiting


class MultiWorkerMirroredStrategy(MeshStrategy):
    def __init__(self, cluster_resolver=None, communication_options=None, *, initialization_timeout=300,
                 heartbeat_timeout=30, step_timeout=300, num_logical_devices=1):
        super().__init__()
        self._resolver = cluster_resolver if cluster_resolver is not None else TFConfigClusterResolver()
        self._step_timeout_ms = int(step_timeout * 1000)
        r = self._resolver
        tasks = r.collective_tasks()
        self._num_workers = max(1, len(tasks))
        if not r.in_collective_group():
            self._in_group = False
            self._worker_index = None
            self._outside = (f"task {r.task_type}:{r.task_id} is not part of the collective group (only "
                             f"{list(COLLECTIVE_TYPES)} tasks are)")
            self._devices, self._local_devices, self._local_replica_ids, self._L = [], [], [], 1
            self._multi_process = False
            return
        self._in_group = True
        self._worker_index = r.process_id()
        import jax

        if self._num_workers > 1:
            from jax._src import distributed as _dist

            if _dist.global_state.client is None:
                if _backend_started():
                    raise RuntimeError("MultiWorkerMirroredStrategy must be created before JAX starts its backend "
                                       "(before any jax.devices() call or array creation): jax.distributed."
                                       "initialize cannot join a running backend")
                coordinator = r.coordinator_address()
                rendezvous(r, initialization_timeout)  # a clear TimeoutError if a task never arrives
                try:
                    jax.distributed.initialize(coordinator_address=coordinator, num_processes=self._num_workers,
                                               process_id=self._worker_index,
                                               initialization_timeout=int(initialization_timeout),
                                               heartbeat_timeout_seconds=int(heartbeat_timeout))
                except Exception as e:  # noqa: BLE001
                    raise TimeoutError(
                        f"MultiWorkerMirroredStrategy: task {r.task_type}:{r.task_id} (process "
                        f"{self._worker_index} of {self._num_workers}) could not join the group at coordinator "
                        f"{coordinator} within {initialization_timeout}s: {type(e).__name__}: {e}. A worker in "
                        f"TF_CONFIG may not have started or may have died.") from e
            elif jax.process_count() != self._num_workers:
                raise RuntimeError(f"jax.distributed is already initialised with {jax.process_count()} processes, but "
                                   f"TF_CONFIG lists {self._num_workers} collective tasks")
        devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
        self._setup(devices, jax.local_devices(), num_logical_devices)

    # ------------------------------------------------------------------ facts
    @property
    def cluster_resolver(self):
        return self._resolver

    def _require_group(self, what):
        if not self._in_group:
            raise RuntimeError(f"{what}: {self._outside}; collective operations are only available on chief and "
                               "worker tasks")

    @property
    def num_replicas_in_sync(self):
        if not self._in_group:
            return 0
        return super().num_replicas_in_sync

    def _input_workers(self):
        return self._num_workers, self._worker_index

    # ------------------------------------------------------------------ guarded collective entry points
    def run(self, fn, args=(), kwargs=None):
        self._require_group("run")
        return super().run(fn, args, kwargs)

    def reduce(self, reduce_op, value, axis=None):
        self._require_group("reduce")
        return super().reduce(reduce_op, value, axis)

    def experimental_distribute_dataset(self, dataset, options=None):
        self._require_group("experimental_distribute_dataset")
        return super().experimental_distribute_dataset(dataset, options)

    def distribute_datasets_from_function(self, dataset_fn, options=None):
        self._require_group("distribute_datasets_from_function")
        return super().distribute_datasets_from_function(dataset_fn, options)

    def experimental_distribute_values_from_function(self, value_fn):
        self._require_group("experimental_distribute_values_from_function")
        return super().experimental_distribute_values_from_function(value_fn)

    def scope(self):
        self._require_group("scope")
        return super().scope()

    # ------------------------------------------------------------------ per-step agreement between workers
    def _agree_step(self, uid, generation, step, local_sizes, stop=None, reported=False):
        if not self._multi_process:
            return list(local_sizes)
        from jax._src import distributed as _dist

        client = _dist.global_state.client
        base = f"{KV_PREFIX}/it{uid}/g{generation}/s{step}"
        if not reported:  # (a step abandoned at a stop and made again: its report is out already)
            client.key_value_set(f"{base}/w{self._worker_index}", ",".join(str(int(x)) for x in local_sizes))
        sizes = []
        for w in range(self._num_workers):
            if w == self._worker_index:
                sizes.extend(int(x) for x in local_sizes)
                continue
            raw = self._wait_for_report(client, f"{base}/w{w}", w, step, stop)
            sizes.extend(int(x) for x in raw.split(",") if x != "")
        if step >= 2:  # keys of older steps are no longer read by anyone once this step is reached
            try:
                client.key_value_delete(f"{KV_PREFIX}/it{uid}/g{generation}/s{step - 2}/w{self._worker_index}")
            except Exception:  # noqa: BLE001
                pass
        return sizes

    def _wait_for_report(self, client, key, w, step, stop=None):
        """Worker w's report for this step, waited for in short slices: at interpreter exit
        (``lifetime.exiting()``) the wait ends at once, so halting a prefetch thread never waits out the
        step timeout for a peer that has stopped iterating (and the thread is not left inside JAX); once
        ``stop`` is set (the iterator halts its producer: ``get_state``, ``close``) it ends with
        ``StepAbandoned``. A peer saving its state at the same step may have halted before making this step:
        waiting for it there hung ``get_state`` until the step timeout, and saved the TimeoutError."""
        deadline = time.monotonic() + self._step_timeout_ms / 1000
        while True:
            left_ms = int((deadline - time.monotonic()) * 1000)
            try:
                return client.blocking_key_value_get(key, max(1, min(left_ms, _REPORT_SLICE_MS)))
            except Exception as e:  # noqa: BLE001 - JAX raises its own error type for a deadline
                if stop is not None and stop.is_set():
                    raise lifetime.StepAbandoned(f"distributed dataset: stopped waiting for worker {w}'s step "
                                                 f"{step}: the iterator is halting") from None
                if lifetime.exiting():
                    raise lifetime.Exiting(f"distributed dataset: stopped waiting for worker {w}'s step {step}: "
                                           "the interpreter is exiting") from None
                if left_ms > _REPORT_SLICE_MS:
                    continue
                raise TimeoutError(
                    f"distributed dataset: worker {w} did not report step {step} within "
                    f"{self._step_timeout_ms / 1000:g}s (this is worker {self._worker_index}); it may have died, "
                    f"be stuck, or be iterating a different number of steps. ({type(e).__name__}: {e})") from e

    def __repr__(self):
        r = self._resolver
        return (f"<MultiWorkerMirroredStrategy task={r.task_type}:{r.task_id} workers={self._num_workers} "
                f"replicas={self.num_replicas_in_sync}>")


def _backend_started() -> bool:
    try:
        from jax._src import xla_bridge

        return bool(getattr(xla_bridge, "_backends", {}))
    except Exception:  # noqa: BLE001
        return False


__all__ = ["MultiWorkerMirroredStrategy"]
