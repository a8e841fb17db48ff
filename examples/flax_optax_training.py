"""A Flax NNX + Optax classifier fed by ``MirroredStrategy.experimental_distribute_dataset``, checkpointed with
orbax together with the input position, and resumed bit-identically under ``enable_op_determinism``.

    python examples/flax_optax_training.py --steps 40 --out full.json
    python examples/flax_optax_training.py --steps 40 --stop-at 15 --ckpt /tmp/ck      # saves at step 15, stops
    python examples/flax_optax_training.py --steps 40 --resume --ckpt /tmp/ck --out resumed.json
    (full.json and resumed.json hold the same final parameters, bit for bit)

Needs ``pip install flax optax orbax-checkpoint``. Runs on 8 forced CPU devices by default; each step's
global batch is sharded over them by the distributed iterator (``PerReplica.arrays`` are global
``jax.Array``s), and the jitted step computes the data-parallel update.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--devices", type=int, default=8)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch", type=int, default=64, help="global batch size")
    p.add_argument("--ckpt", default=None, help="orbax checkpoint directory")
    p.add_argument("--stop-at", type=int, default=None, help="save a checkpoint at this step and stop")
    p.add_argument("--resume", action="store_true", help="restore the latest checkpoint in --ckpt first")
    p.add_argument("--out", default=None, help="write losses and a digest of the final parameters here")
    return p.parse_args(argv)


def make_pipeline(examples: int, batch: int):
    """Shuffled, augmented (per-element RNG: the same noise under any parallelism), batched, repeated."""
    import numpy as np

    from jaxfeed.pipeline import AUTOTUNE, Dataset

    rng = np.random.default_rng(0)
    x = rng.normal(size=(examples, 16)).astype(np.float32)
    w = rng.normal(size=(16, 4)).astype(np.float32)
    y = np.argmax(x @ w, axis=1).astype(np.int32)

    def augment(features, label, element_rng):
        return features + element_rng.normal(0.0, 0.05, features.shape).astype(np.float32), label

    return (Dataset.from_tensor_slices((x, y))
            .shuffle(examples, seed=7)
            .map(augment, with_rng=True, seed=11, num_parallel_calls=AUTOTUNE)
            .batch(batch, drop_remainder=True)
            .repeat()
            .prefetch(2))


def main(argv=None):
    args = parse_args(argv)
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               f" --xla_force_host_platform_device_count={args.devices}").strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

    from jaxfeed.determinism import enable_op_determinism, set_random_seed

    enable_op_determinism()
    set_random_seed(1234)

    import jax
    import numpy as np
    import optax
    import orbax.checkpoint as ocp
    from flax import nnx

    from jaxfeed import distribute as jd
    from jaxfeed.distribute.orbax_handler import JaxfeedCheckpointRestore, JaxfeedCheckpointSave

    class Classifier(nnx.Module):
        def __init__(self, rngs):
            self.hidden = nnx.Linear(16, 32, rngs=rngs)
            self.out = nnx.Linear(32, 4, rngs=rngs)

        def __call__(self, x):
            return self.out(nnx.relu(self.hidden(x)))

    model = Classifier(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)

    @nnx.jit
    def train_step(model, optimizer, x, y):
        def loss_fn(model):
            return optax.softmax_cross_entropy_with_integer_labels(model(x), y).mean()

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss

    strategy = jd.MirroredStrategy(jax.local_devices()[:args.devices])
    iterator = iter(strategy.experimental_distribute_dataset(make_pipeline(2048, args.batch)))
    manager = ocp.CheckpointManager(os.path.abspath(args.ckpt)) if args.ckpt else None

    start = 0
    if args.resume:
        step = manager.latest_step()
        state = jax.tree.map(np.asarray, nnx.state((model, optimizer)).to_pure_dict())
        restored = manager.restore(step, args=ocp.args.Composite(
            train=ocp.args.StandardRestore(state), data=JaxfeedCheckpointRestore(iterator)))
        graph_state = nnx.state((model, optimizer))
        nnx.replace_by_pure_dict(graph_state, restored.train)
        nnx.update((model, optimizer), graph_state)
        start = step

    losses = []
    for step in range(start, args.steps):
        if args.stop_at is not None and step == args.stop_at:
            state = jax.tree.map(np.asarray, nnx.state((model, optimizer)).to_pure_dict())
            manager.save(step, args=ocp.args.Composite(train=ocp.args.StandardSave(state),
                                                       data=JaxfeedCheckpointSave(iterator)))
            manager.wait_until_finished()
            break
        x, y = next(iterator)  # a (features, labels) step: a tuple of PerReplica, as in tf.distribute
        losses.append(float(train_step(model, optimizer, x.arrays, y.arrays)))
    iterator.close()
    if manager is not None:
        manager.close()

    params = jax.tree.map(np.asarray, nnx.state(model, nnx.Param).to_pure_dict())
    digest = hashlib.sha256(b"".join(a.tobytes() for a in jax.tree.leaves(params))).hexdigest()
    result = {"first_step": start, "losses": losses, "params_sha256": digest}
    print(json.dumps({"steps": len(losses), "last_loss": losses[-1] if losses else None, "params": digest[:16]}))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f)
    return result


if __name__ == "__main__":
    main()
