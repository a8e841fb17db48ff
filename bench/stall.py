"""P7's training-loop check: does the distributed feed keep a training step waiting?

A jitted MLP step (forward, gradient, SGD update) runs over the distributed iterator of P2's pipeline
(``shuffle -> repeat -> batch(B) -> prefetch``, via ``experimental_distribute_dataset`` with its default
prefetch to the devices). The step is sized to take about twice the time the feed needs per step when it
runs alone, so a feed that overlaps with the step never makes the loop wait. The *input stall* is the time
the loop spends in ``next(iterator)``, as a share of the whole loop's time (wait + step); the step is
waited for at every iteration (``block_until_ready``), as a loop that logs its loss does, so the feed has
exactly one step's time to prepare the next batch. Called from ``bench/distributed.py`` (8 CPU devices).
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from . import workloads as w

WARMUP_STEPS = 5  # compile, first batches, the prefetch thread's start: not counted
STEP_RATIO = 2.0  # step time / the feed's time per step, as the issue sizes it
FEATURES = None  # P2's columns (taken from the data)


def _dataset(d, batch_size):
    from jaxfeed.pipeline import AUTOTUNE, Dataset

    return (Dataset.from_tensor_slices(d.rows).shuffle(w.P2_BUFFER, seed=w.SEED).repeat()
            .batch(batch_size, drop_remainder=True).prefetch(AUTOTUNE))


def _global_array(batch):
    """The step's input: the PerReplica's global ``jax.Array`` (sharded over the replicas)."""
    return batch.arrays if hasattr(batch, "arrays") else batch


def feed_seconds_per_step(strategy, d, batch_size, seconds) -> float:
    """The feed alone: seconds per step of the distributed iterator over a run of steps, each step waited
    for (the mean: with a prefetch buffer most ``next`` calls return at once and a few wait long)."""
    import jax

    it = iter(strategy.experimental_distribute_dataset(_dataset(d, batch_size)))
    steps = 0
    try:
        for _ in range(WARMUP_STEPS):
            jax.block_until_ready(_global_array(next(it)))
        start = time.perf_counter()
        while time.perf_counter() - start < seconds or steps < 10:
            jax.block_until_ready(_global_array(next(it)))
            steps += 1
        return (time.perf_counter() - start) / steps
    finally:
        getattr(it, "close", lambda: None)()


def make_step(mesh, features, hidden):
    """A jitted SGD step of a 3-layer MLP (features -> hidden -> hidden -> 1), regressing the row sum; the
    parameters replicated over ``mesh``, the batch sharded over its replica axis."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec

    rng = np.random.default_rng(0)
    shapes = [(features, hidden), (hidden, hidden), (hidden, 1)]
    params = [(rng.standard_normal(s, dtype=np.float32) / np.sqrt(s[0]), np.zeros(s[1], np.float32))
              for s in shapes]
    params = jax.device_put(params, NamedSharding(mesh, PartitionSpec()))

    def loss(params, x):
        h = x
        for i, (wgt, b) in enumerate(params):
            h = h @ wgt + b
            if i < len(params) - 1:
                h = jax.nn.relu(h)
        return jnp.mean((h[:, 0] - x.sum(axis=1)) ** 2)

    @jax.jit
    def step(params, x):
        value, grads = jax.value_and_grad(loss)(params, x)
        return jax.tree_util.tree_map(lambda p, g: p - 1e-4 * g, params, grads), value

    return step, params


def step_seconds(step, params, x, repeats=10) -> float:
    import jax

    jax.block_until_ready(step(params, x))  # compile
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(step(params, x))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def size_step(mesh, sharding, features, batch_size, target, tries=5):
    """The hidden width whose step takes about ``target`` seconds (the cost grows as hidden**2 once the
    hidden layer dominates); returns (hidden, step seconds, step, params)."""
    import jax

    x = jax.device_put(np.ones((batch_size, features), np.float32), sharding)
    hidden, best = 64, None
    for _ in range(tries):
        step, params = make_step(mesh, features, hidden)
        t = step_seconds(step, params, x)
        if best is None or abs(np.log(t / target)) < abs(np.log(best[1] / target)):
            best = (hidden, t, step, params)
        if 0.8 < t / target < 1.25:
            break
        scale = float(np.clip(np.sqrt(target / t), 0.25, 4.0))
        new = int(np.clip(round(hidden * scale / 8) * 8, 8, 16384))
        if new == hidden:
            break
        hidden = new
    return best


def run_loop(strategy, d, batch_size, step, params, seconds) -> dict:
    """The training loop over the distributed iterator: wait (in ``next``) and step time per iteration."""
    import jax

    it = iter(strategy.experimental_distribute_dataset(_dataset(d, batch_size)))
    waits, totals = [], []
    try:
        for _ in range(WARMUP_STEPS):
            params, loss = step(params, _global_array(next(it)))
            jax.block_until_ready(loss)
        start = time.perf_counter()
        while time.perf_counter() - start < seconds or len(totals) < 20:
            t0 = time.perf_counter()
            batch = next(it)
            t1 = time.perf_counter()
            params, loss = step(params, _global_array(batch))
            jax.block_until_ready(loss)
            t2 = time.perf_counter()
            waits.append(t1 - t0)
            totals.append(t2 - t0)
    finally:
        getattr(it, "close", lambda: None)()
    waits, totals = np.array(waits), np.array(totals)
    return {"steps": len(totals), "stall_pct": float(100 * waits.sum() / totals.sum()),
            "wait_ms_median": float(np.median(waits) * 1e3), "wait_ms_p99": float(np.percentile(waits, 99) * 1e3),
            "loop_ms_per_step": float(totals.mean() * 1e3)}


def run(strategy, d, batch_sizes=(256, 4096), seconds=2.0) -> dict:
    """{batch size: figures} for each batch size (see the module docstring)."""
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(jax.devices()), ("replica",))
    sharding = NamedSharding(mesh, PartitionSpec("replica"))
    features = d.rows.shape[1]
    out = {}
    for bs in batch_sizes:
        feed = feed_seconds_per_step(strategy, d, bs, seconds / 2)
        hidden, alone, step, params = size_step(mesh, sharding, features, bs, STEP_RATIO * feed)
        loop = run_loop(strategy, d, bs, step, params, seconds)
        out[str(bs)] = {"feed_ms_per_step": feed * 1e3, "hidden": hidden, "step_ms_alone": alone * 1e3,
                        "step_over_feed": alone / feed, **loop}
    return out
