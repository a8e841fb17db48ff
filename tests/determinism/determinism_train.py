"""A small data-parallel training loop, run in a fresh process per device count (XLA_FLAGS is read once).

    python determinism_train.py DEVICES MODE   -> prints one JSON line of digests

MODE ``all_reduce``: each replica's gradient (summed over its examples) is all-reduced in the step;
MODE ``per_example``: per-example gradients are reduced on the host with ``reduce(SUM, axis=0)``.
"""

import hashlib
import json
import os
import sys

devices, mode = int(sys.argv[1]), sys.argv[2]
os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
os.environ["JAX_PLATFORMS"] = "cpu"

from jaxfeed import determinism  # noqa: E402

determinism.enable_op_determinism(strict=True)
determinism.set_random_seed(0)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from jaxfeed.distribute import MirroredStrategy, PerReplica, ReduceOp, get_replica_context  # noqa: E402
from jaxfeed.pipeline import AUTOTUNE, Dataset  # noqa: E402

assert len(jax.devices()) == devices
data_rng = np.random.default_rng(0)
X = data_rng.normal(size=(256, 16)).astype(np.float32)
Y = (X @ data_rng.normal(size=(16, 1)).astype(np.float32) + 0.1).astype(np.float32)


def augment(x, y, rng):
    return x + rng.normal(scale=0.01, size=x.shape).astype(np.float32), y


ds = (Dataset.from_tensor_slices((X, Y)).shuffle(256, seed=1)
      .map(augment, with_rng=True, seed=2, num_parallel_calls=AUTOTUNE)
      .batch(64, drop_remainder=True).repeat(3).prefetch(2))
strategy = MirroredStrategy()
dist = strategy.experimental_distribute_dataset(ds)
params = {"w": jnp.zeros((16, 1), jnp.float32), "b": jnp.zeros((1,), jnp.float32)}


def loss(p, x, y):
    return jnp.sum((x @ p["w"] + p["b"] - y) ** 2)


def replica_grad(p, batch):
    x, y = batch
    g = jax.grad(loss)(p, x, y)
    return get_replica_context().all_reduce(ReduceOp.SUM, g)


def per_example_grads(p, batch):
    x, y = batch
    return jax.vmap(lambda xi, yi: jax.grad(loss)(p, xi[None], yi[None]))(x, y)


def first_replica(tree):
    return jax.tree_util.tree_map(lambda v: strategy.experimental_local_results(v)[0], tree,
                                  is_leaf=lambda v: isinstance(v, PerReplica))


for batch in dist:
    if mode == "all_reduce":
        g = first_replica(strategy.run(replica_grad, args=(params, batch)))
    else:
        out = strategy.run(per_example_grads, args=(params, batch))
        if devices == 1:  # one replica: run returns plain arrays, and reduce(axis=0) of those ignores the axis
            g = jax.tree_util.tree_map(lambda v: np.sum(np.asarray(v), axis=0), out)
        else:
            g = strategy.reduce(ReduceOp.SUM, out, axis=0)
    params = jax.tree_util.tree_map(lambda a, b: a - 0.001 * b, params, g)

digest = hashlib.sha256(b"".join(np.asarray(params[k]).tobytes() for k in sorted(params))).hexdigest()
print(json.dumps({"devices": devices, "mode": mode, "params": digest,
                  "w0": float(np.asarray(params["w"])[0, 0])}))
