"""Train a 2-layer MLP with a hand-written SGD step, data-parallel with jaxfeed.distribute.

One process, 8 forced CPU devices (MirroredStrategy):
    python examples/train_mlp.py --devices 8 --steps 30
The same global batch on one device (the loss curve matches up to float reduction order):
    python examples/train_mlp.py --devices 1 --steps 30
Several workers (MultiWorkerMirroredStrategy, one process per TF_CONFIG task, here 2 devices each):
    TF_CONFIG='{"cluster": {"worker": ["127.0.0.1:23456", "127.0.0.1:23457"]},
                "task": {"type": "worker", "index": 0}}' python examples/train_mlp.py --devices 2
    (and the same with "index": 1 in a second shell)
Read the data from TFRecord files of tf.train.Example instead of memory: add --tfrecord DIR (the files are
written there first by the chief / single process if missing).

Data parallelism does not change the maths: each replica computes the gradient of
sum(per-example loss) / GLOBAL_BATCH over its share, the replicas' gradients are added with all_reduce
(a fixed order), and every replica applies the same update. What differs between 1 and N devices is only the
order of the float additions (per-replica partial sums, then the sum across replicas), so losses agree to
about 1e-6 relative, not bitwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--devices", type=int, default=8, help="forced CPU devices in this process")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=64, help="global batch size")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--examples", type=int, default=1024)
    p.add_argument("--tfrecord", default=None, help="directory of TFRecord files to read (written if missing)")
    p.add_argument("--out", default=None, help="write the losses and final parameters as JSON here")
    return p.parse_args(argv)


def make_data(n, d_in=8, d_out=2, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d_in)).astype(np.float32)
    w = rng.normal(size=(d_in, d_out)).astype(np.float32)
    y = (np.tanh(x @ w) + 0.1 * rng.normal(size=(n, d_out))).astype(np.float32)
    return x, y


def write_tfrecords(directory, x, y, shards=4):
    from jaxfeed.formats import TFRecordWriter, make_example

    os.makedirs(directory, exist_ok=True)
    for s in range(shards):
        path = os.path.join(directory, f"part-{s:03d}.tfrecord")
        if os.path.exists(path):
            continue
        with TFRecordWriter(path + ".tmp") as w:
            for i in range(s, len(x), shards):
                w.write(make_example({"x": x[i].tolist(), "y": y[i].tolist()}).SerializeToString())
        os.replace(path + ".tmp", path)


def build_dataset(args, x, y):
    import numpy as np

    from jaxfeed.pipeline import Dataset

    if args.tfrecord:
        from jaxfeed.formats import FixedLenFeature, TFRecordDataset, parse_example

        files = sorted(os.path.join(args.tfrecord, f) for f in os.listdir(args.tfrecord) if f.endswith(".tfrecord"))
        spec = {"x": FixedLenFeature([x.shape[1]], np.float32), "y": FixedLenFeature([y.shape[1]], np.float32)}
        ds = TFRecordDataset(files).repeat().batch(args.batch, drop_remainder=True)
        return ds.map(lambda b: (lambda f: (f["x"], f["y"]))(parse_example(b, spec)))
    return Dataset.from_tensor_slices((x, y)).repeat().batch(args.batch, drop_remainder=True)


def main(argv=None):
    args = parse_args(argv)
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               f" --xla_force_host_platform_device_count={args.devices}").strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from jaxfeed import distribute as jd

    if os.environ.get("TF_CONFIG"):
        strategy = jd.MultiWorkerMirroredStrategy()
        chief = strategy.cluster_resolver.task_type in ("chief", None) or (
            strategy.cluster_resolver.task_type == "worker" and strategy.cluster_resolver.task_id == 0
            and "chief" not in strategy.cluster_resolver.cluster_spec().jobs)
    else:
        import jax

        # the first --devices local devices (all of them in a fresh process, where XLA_FLAGS made that many)
        strategy = jd.MirroredStrategy(jax.local_devices()[:args.devices])
        chief = True
    import jax
    import jax.numpy as jnp
    import numpy as np

    x, y = make_data(args.examples)
    if args.tfrecord and chief:
        write_tfrecords(args.tfrecord, x, y)
    if args.tfrecord:
        import time

        while not os.path.isdir(args.tfrecord) or len(
                [f for f in os.listdir(args.tfrecord) if f.endswith(".tfrecord")]) < 4:
            time.sleep(0.05)  # another worker (the chief) is writing them

    rng = np.random.default_rng(1)
    hidden = 16
    init = [rng.normal(size=(x.shape[1], hidden)).astype(np.float32) * 0.3, np.zeros(hidden, np.float32),
            rng.normal(size=(hidden, y.shape[1])).astype(np.float32) * 0.3, np.zeros(y.shape[1], np.float32)]
    with strategy.scope():
        params = [jd.Variable(v, name=n) for v, n in zip(init, ["w1", "b1", "w2", "b2"])]

    dist = strategy.experimental_distribute_dataset(build_dataset(args, x, y))
    global_batch = args.batch

    def forward(p, xb):
        h = jnp.tanh(xb @ p[0] + p[1])
        return h @ p[2] + p[3]

    def step(batch):
        xb, yb = batch
        ctx = jd.get_replica_context()

        def loss_fn(p):
            per_example = jnp.sum((forward(p, xb) - yb) ** 2, axis=-1)
            return jnp.sum(per_example) / global_batch

        values = [v.read_value() for v in params]
        loss, grads = jax.value_and_grad(loss_fn)(values)
        grads = ctx.all_reduce(jd.ReduceOp.SUM, grads)
        for v, g in zip(params, grads):
            v.assign_sub(args.lr * g)
        return loss

    losses = []
    it = iter(dist)
    for _ in range(args.steps):
        per_replica_loss = strategy.run(step, args=(next(it),))
        losses.append(float(strategy.reduce(jd.ReduceOp.SUM, per_replica_loss, axis=None)))
    it.close()
    result = {"losses": losses, "params": [np.asarray(v.numpy()).tolist() for v in params],
              "replicas": strategy.num_replicas_in_sync, "process": jax.process_index()}
    if chief:
        print(f"[process {jax.process_index()}] replicas={strategy.num_replicas_in_sync} "
              f"loss {losses[0]:.6f} -> {losses[-1]:.6f}", file=sys.stderr)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f)
    return result


def leave_group():
    """Multi-worker runs: leave the JAX group together before the process exits (a coordinator that exits
    first makes the other workers abort)."""
    if "jax" in sys.modules:
        import jax

        jax.distributed.shutdown()  # does nothing when jax.distributed was not initialised


if __name__ == "__main__":
    main()
    leave_group()
