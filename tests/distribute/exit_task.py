"""A program for the exit tests (not a test module): builds a distributed iterator of one kind, takes a step
or a few, and then lets Python exit with the iterator's prefetch thread still running.

    python exit_task.py KIND
KIND: "from_function" (issue 15's reproduction), "per_replica" (PER_REPLICA input, one pipeline per replica),
"dataset" (experimental_distribute_dataset), "host" (experimental_fetch_to_device=False), "uncaught" (a
training loop of ``run`` steps ended by an uncaught exception: exit status 1), "blocked_source" (the thread
waits in a source that never answers), "on_demand" (a loop that only drains: steps made on the consumer's
thread, the pipeline's prefetch thread parked), "consumer_thread" / "late_consumer_thread" (the main thread returns
while a non-daemon thread iterates to the end: after its first step / at once), "multi_worker" (run under
TF_CONFIG by the cluster harness: each worker takes a step and exits normally).
"""

import os
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
os.environ.setdefault("JAX_PLATFORMS", "cpu")


def big_rows():
    import numpy as np

    from jaxfeed.pipeline import Dataset

    return Dataset.from_tensor_slices(np.ones((16, 1 << 19), np.float32))


def main(kind):
    import numpy as np

    from jaxfeed import distribute as jd
    from jaxfeed.pipeline import Dataset, TensorSpec

    if kind == "multi_worker":
        strategy = jd.MultiWorkerMirroredStrategy(initialization_timeout=60, step_timeout=60)
        it = iter(strategy.experimental_distribute_dataset(Dataset.range(1000).repeat().batch(8)))
        next(it)
        print("took a step", flush=True)
        return
    strategy = jd.MirroredStrategy()
    if kind == "from_function":
        it = iter(strategy.distribute_datasets_from_function(lambda c: Dataset.range(10).repeat().batch(2)))
        next(it)
    elif kind == "per_replica":
        options = jd.InputOptions(experimental_replication_mode=jd.InputReplicationMode.PER_REPLICA)
        it = iter(strategy.distribute_datasets_from_function(lambda c: Dataset.range(10).repeat().batch(2),
                                                             options))
        next(it)
    elif kind == "dataset":  # large steps: at exit the thread is placing the next one on the devices
        it = iter(strategy.experimental_distribute_dataset(big_rows().repeat().batch(8)))
        next(it)
    elif kind == "host":
        options = jd.InputOptions(experimental_fetch_to_device=False)
        it = iter(strategy.experimental_distribute_dataset(big_rows().repeat().batch(8), options))
        next(it)
    elif kind == "blocked_source":  # the thread is waiting in a source that never answers: exit must not hang
        import time

        from jaxfeed.distribute import lifetime

        lifetime.EXIT_WAIT_S = 2.0

        def rows():
            yield np.zeros(4, np.float32)
            time.sleep(3600)
            yield np.zeros(4, np.float32)

        ds = Dataset.from_generator(rows, output_signature=TensorSpec((4,), np.float32)).batch(1)
        it = iter(strategy.experimental_distribute_dataset(ds))
        next(it)
    elif kind in ("consumer_thread", "late_consumer_thread"):
        # the main thread ends while another (non-daemon) thread still trains: after that thread's first step
        # (its iterator's thread started before exit began), or at once (started while exiting)
        import threading

        dist = strategy.experimental_distribute_dataset(Dataset.range(400).batch(8))
        started = threading.Event()

        def train():
            steps = 0
            for _ in dist:
                steps += 1
                started.set()
            print(f"the training thread consumed {steps} steps", flush=True)

        threading.Thread(target=train, name="training-loop").start()
        if kind == "consumer_thread":
            started.wait()
    elif kind == "on_demand":  # a loop that only drains: steps made on demand, the pipeline's prefetch parked
        from jaxfeed.pipeline.engine import overlap

        overlap.TO_DEMAND = overlap.TO_THREAD = float("inf")  # (on demand after one window, and for good)
        it = iter(strategy.experimental_distribute_dataset(Dataset.range(100_000).repeat().batch(8).prefetch(-1)))
        for _ in range(300):
            next(it)
        if not it.feed_decision.startswith("on demand"):
            raise SystemExit(f"expected steps made on demand, got {it.feed_decision!r}")
        print(it.feed_decision, flush=True)
    elif kind == "uncaught":
        dist = strategy.distribute_datasets_from_function(
            lambda c: Dataset.from_tensor_slices(np.arange(1000, dtype=np.float32)).repeat().batch(16))
        for i, step in enumerate(dist):
            out = strategy.run(lambda x: jd.get_replica_context().all_reduce("SUM", x.sum()), args=(step,))
            if i == 3:
                raise RuntimeError("the training loop failed (on purpose)")
    else:
        raise SystemExit(f"unknown kind {kind!r}")
    print("took a step", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
