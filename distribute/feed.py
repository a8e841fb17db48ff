"""``InputFeed``: the one object a strategy hands the datasets it distributes.

Distributed datasets and iterators (``distributed_dataset.py``, ``distributed_iterator.py``) know their
strategy only through it, so the strategy's internals can change without touching input code, and a worker's
dataset can be built from a layout alone (``InputFeed.layout``: checking a saved state, tests).

What it holds, fixed when the dataset is distributed:
- ``num_replicas``: replicas in sync, over every worker; ``num_workers`` and ``worker_index``: the input
  workers (processes) and this one's position; ``local_replicas``: the replica ids this worker feeds, in
  order; ``multi_process``: whether several processes take part.

What it does, for the iterators:
- ``new_iterator_id()``: the n-th iterator of a strategy gets the same id on every worker (the key of the
  step agreement below).
- ``agree_step(iterator_id, generation, step, local_sizes)``: every replica's batch size on this step, in
  replica order (one worker: its own sizes; several: reported to and read from the others).
- ``on_devices(rows, sizes, cap)`` / ``on_host(rows, sizes, cap)``: this worker's rows of one component (the
  local replicas' pieces one after another, each ``cap`` rows) as a ``PerReplica`` value of the strategy,
  placed on the replicas' devices or kept as numpy on the host.
  ``on_devices_many(rows_list, sizes, cap)``: several components of one step placed at once.

The strategy builds it (``MeshStrategy._input_feed``) from its own parts; nothing else is shared.
"""

from __future__ import annotations

from typing import Callable, Sequence


class InputFeed:
    def __init__(self, *, num_replicas: int, num_workers: int = 1, worker_index: int = 0,
                 local_replicas: Sequence[int] = (), multi_process: bool = False, owner=None,
                 place: Callable | None = None, agree_step: Callable | None = None,
                 next_iterator_id: Callable[[], int] | None = None):
        self.num_replicas = int(num_replicas)
        self.num_workers = int(num_workers)
        self.worker_index = int(worker_index)
        self.local_replicas = tuple(int(r) for r in local_replicas)
        self.multi_process = bool(multi_process)
        self._owner = owner  # the strategy whose values the feed makes (PerReplica checks it in ``run``)
        self._place = place  # [rows (numpy), ...] -> their global arrays over this worker's replicas' devices
        self._agree = agree_step
        self._next_id = next_iterator_id

    @classmethod
    def layout(cls, num_replicas: int, num_workers: int = 1, worker_index: int = 0) -> "InputFeed":
        """A feed that only says where the data goes: enough to build worker ``worker_index``'s dataset (its
        graph and fingerprint), not to iterate it."""
        return cls(num_replicas=num_replicas, num_workers=num_workers, worker_index=worker_index)

    @property
    def replicas_per_worker(self) -> int:
        return self.num_replicas // self.num_workers

    # ------------------------------------------------------------------ for the iterators
    def new_iterator_id(self) -> int:
        return self._runtime("new_iterator_id", self._next_id)()

    def agree_step(self, iterator_id: int, generation: int, step: int, local_sizes: list, stop=None,
                   reported: bool = False) -> list:
        """Every replica's batch size on this step. ``stop`` (an Event): a wait for a peer's report ends with
        ``StepAbandoned`` once it is set; ``reported``: this worker's report of the step is already out (a
        step abandoned before, made again)."""
        return self._runtime("agree_step", self._agree)(iterator_id, generation, step, local_sizes, stop=stop,
                                                        reported=reported)

    def on_devices(self, rows, sizes, cap):
        """One component's rows as a per-replica value on the replicas' devices (rows already in the dtype
        that goes to the devices: see ``values.to_device_dtype``)."""
        return self.on_devices_many([rows], sizes, cap)[0]

    def on_devices_many(self, rows_list, sizes, cap):
        """``on_devices`` for several components of one step, placed by one call of the strategy (one
        transfer dispatch per step rather than one per component)."""
        placed = self._runtime("on_devices", self._place)(list(rows_list))
        return [self._per_replica(leaf, sizes, cap, host=False) for leaf in placed]

    def on_host(self, rows, sizes, cap):
        """One component's rows as a per-replica value kept on the host (strings, or
        ``experimental_fetch_to_device=False``)."""
        return self._per_replica(rows, sizes, cap, host=True)

    def _per_replica(self, leaf, sizes, cap, host):
        from .values import PerReplica

        return PerReplica(_one_leaf(), [leaf], self._owner, stacked=False, sizes=sizes, cap=cap, host=host)

    def _runtime(self, what, fn):
        if fn is None:
            raise RuntimeError(f"InputFeed.{what}: this feed only describes a layout (InputFeed.layout); iterate "
                               "a dataset distributed by a strategy")
        return fn

    def __repr__(self):
        return (f"InputFeed(num_replicas={self.num_replicas}, num_workers={self.num_workers}, "
                f"worker_index={self.worker_index}, local_replicas={list(self.local_replicas)})")


_ONE_LEAF = None


def _one_leaf():
    """The tree structure of a single leaf (what each component's ``PerReplica`` holds), made once."""
    global _ONE_LEAF
    if _ONE_LEAF is None:
        import jax

        _ONE_LEAF = jax.tree_util.tree_structure(0)
    return _ONE_LEAF
