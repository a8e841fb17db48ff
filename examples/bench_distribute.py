"""Measure the per-step overhead of ``strategy.run`` and the host-to-device feed throughput.

    python examples/bench_distribute.py --devices 8

Prints one line per measurement (the best of --repeats runs: the machine may be shared). ``run`` overhead is compared with calling the
same kind of compiled program directly (``jax.jit(jax.shard_map(...))``), so the difference is what jaxfeed
adds per step (argument flattening, cache lookup, variable plumbing, output wrapping).
"""

from __future__ import annotations

import argparse
import os
import time


def _arrays(value):
    return getattr(value, "arrays", value)  # PerReplica, or a plain array with one replica


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--devices", type=int, default=8)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--feed-mb", type=int, default=64)
    args = p.parse_args(argv)
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.devices}"
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jaxfeed import distribute as jd
    from jaxfeed.pipeline import AutoShardPolicy, Dataset, Options

    s = jd.MirroredStrategy()
    n = s.num_replicas_in_sync
    pr = s.experimental_distribute_values_from_function(lambda c: np.ones(16, np.float32))

    def timed(fn, steps):
        results = []
        for _ in range(args.repeats):
            fn(5)  # warm up (compile)
            t = time.perf_counter()
            fn(steps)
            results.append((time.perf_counter() - t) / steps)
        return min(results)  # the least disturbed run (this machine is shared)

    def report(name, seconds, extra=""):
        print(f"{name:58s} {seconds * 1e6:9.1f} us/step {extra}")

    # ------------------------------------------------------------------ run overhead
    def trivial(x):
        return x + 1.0

    def with_all_reduce(x):
        return jd.get_replica_context().all_reduce("SUM", x)

    for name, fn in [("trivial", trivial), ("all_reduce", with_all_reduce)]:
        s.run(fn, args=(pr,))
        compiled, _ = next(v for k, v in s._cache.items() if k[0] is fn)
        direct_args = ((), tuple(pr._leaves))

        def loop_run(k, fn=fn):
            out = None
            for _ in range(k):
                out = s.run(fn, args=(pr,))
            jax.block_until_ready(_arrays(out))

        def loop_direct(k, compiled=compiled):
            out, inflight = None, []
            for _ in range(k):
                out = compiled(*direct_args)
                inflight.append(out)  # the same cap on steps in flight as run (8)
                if len(inflight) > 8:
                    jax.block_until_ready(inflight.pop(0))
            jax.block_until_ready(out)

        a, b = timed(loop_run, args.steps), timed(loop_direct, args.steps)
        report(f"run({name}), {n} replicas", a, f"(the same compiled program called directly: {b * 1e6:.1f} us)")

    # jaxfeed's own Python work per run call: the compiled program replaced by one returning cached outputs
    s.run(trivial, args=(pr,))
    key = next(k for k in s._cache if k[0] is trivial)
    compiled, meta = s._cache[key]
    cached = compiled(tuple(v._value for v in s._live_variables()), tuple(pr._leaves))
    s._cache[key] = (lambda *a: cached, meta)

    def loop_python(k):
        for _ in range(k):
            s.run(trivial, args=(pr,))

    report("run() Python-side work alone (program call stubbed)", timed(loop_python, args.steps * 3))
    s._cache[key] = (compiled, meta)

    with s.scope():
        params = [jd.Variable(np.zeros((64, 64), np.float32)) for _ in range(4)]

    def sgd(x):
        g = jd.get_replica_context().all_reduce("SUM", jnp.ones((64, 64)) * x.sum())
        for v in params:
            v.assign_sub(0.01 * g)
        return x.sum()

    def loop_sgd(k):
        out = None
        for _ in range(k):
            out = s.run(sgd, args=(pr,))
        jax.block_until_ready(_arrays(out))

    report(f"run(SGD step on 4 mirrored variables), {n} replicas", timed(loop_sgd, args.steps))

    # ------------------------------------------------------------------ feed throughput
    row = 256 * 4
    rows = args.feed_mb * 2**20 // row
    data = np.random.default_rng(0).normal(size=(rows, 256)).astype(np.float32)
    o = Options()
    o.experimental_distribute.auto_shard_policy = AutoShardPolicy.OFF
    for batch in (256, 4096):
        ds = Dataset.from_tensor_slices(data).batch(batch, drop_remainder=True).with_options(o)
        for buffer in (0, 2):
            opts = jd.InputOptions(experimental_per_replica_buffer_size=buffer)
            times = []
            for _ in range(args.repeats):
                t = time.perf_counter()
                last = None
                nsteps = 0
                for step in s.experimental_distribute_dataset(ds, opts):
                    last = step
                    nsteps += 1
                jax.block_until_ready(_arrays(last))
                times.append(time.perf_counter() - t)
            sec = min(times)
            mb = nsteps * batch * row / 2**20
            print(f"feed batch={batch:5d} buffer={buffer}: {mb / sec:8.0f} MB/s  {nsteps / sec:8.0f} steps/s "
                  f"({nsteps} steps of {batch * row / 2**20:.2f} MB)")
        # the floor: numpy batches placed with device_put alone (no pipeline)
        t = time.perf_counter()
        last = None
        for i in range(0, rows - batch + 1, batch):
            last = jax.device_put(np.array(data[i:i + batch]), s._batch_sharding)
        jax.block_until_ready(last)
        sec = time.perf_counter() - t
        print(f"raw device_put batch={batch:5d}:     {rows * row / 2**20 / sec:8.0f} MB/s")


if __name__ == "__main__":
    main()
