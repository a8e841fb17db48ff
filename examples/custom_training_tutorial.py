"""The tf.distribute custom-training tutorial (tensorflow.org/tutorials/distribute/custom_training) on jaxfeed
and JAX: MirroredStrategy, distributed train and test steps, train loss and accuracy, test loss and accuracy.

    python examples/custom_training_tutorial.py --devices 4            # 4 forced CPU devices = 4 replicas
    python examples/custom_training_tutorial.py --devices 1 --batch-per-replica 64   # same global batch, 1 device

What differs from the tutorial, and why:
- The model is a 2-layer MLP in jax.numpy and the optimizer plain SGD (no Keras); only numpy and JAX are needed.
- The data is a small synthetic 3-class problem (1000 training, 121 test examples) instead of Fashion-MNIST,
  chosen so that the last step of each epoch is ragged (1000 = 15 x 64 + 40, 121 = 64 + 57 on 4 replicas).
- The metrics are small classes over ``SyncOnRead`` variables summed across replicas, as Keras metrics are.
- JAX runs one SPMD program over equal shapes, so on a ragged step every replica's batch is zero-padded to
  the same size, where TF's batches are simply shorter. The replica context says which rows are real
  (``jd.get_replica_context().example_mask(n)``): per-example losses and metric updates are weighted by it.
  With the mask every number is TF's: the test metrics count 121 examples (not 128), and the training loss
  is TF's ``compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH_SIZE)`` summed over
  replicas.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--devices", type=int, default=4, help="forced CPU devices (replicas) in this process")
    p.add_argument("--batch-per-replica", type=int, default=16)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--lr", type=float, default=0.5)
    p.add_argument("--out", default=None, help="write the metrics, example counts and final parameters here (JSON)")
    return p.parse_args(argv)


def make_data(n_train=1000, n_test=121, features=16, classes=3, seed=0):
    """A synthetic classification problem: the label is the argmax of a noisy linear map of the features."""
    import numpy as np

    rng = np.random.default_rng(seed)
    w = rng.normal(size=(features, classes))
    x = rng.normal(size=(n_train + n_test, features)).astype(np.float32)
    y = np.argmax(x @ w + 0.5 * rng.normal(size=(len(x), classes)), axis=1).astype(np.int32)
    return (x[:n_train], y[:n_train]), (x[n_train:], y[n_train:])


def forward(params, x):
    import jax.numpy as jnp

    w1, b1, w2, b2 = params
    return jnp.tanh(x @ w1 + b1) @ w2 + b2


def per_example_cross_entropy(labels, logits):
    """Keras' SparseCategoricalCrossentropy(from_logits=True, reduction=NONE)."""
    import jax
    import jax.numpy as jnp

    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.take_along_axis(logp, labels[:, None].astype(jnp.int32), axis=-1)[:, 0]


class Mean:
    """tf.keras.metrics.Mean: a weighted total and count, one copy per replica, summed when read."""

    def __init__(self, name):
        from jaxfeed import distribute as jd

        on_read = dict(synchronization=jd.VariableSynchronization.ON_READ, aggregation=jd.VariableAggregation.SUM)
        self.name = name
        self.total = jd.Variable(0.0, name=f"{name}/total", **on_read)
        self.count = jd.Variable(0.0, name=f"{name}/count", **on_read)

    def update_state(self, values, sample_weight=None):
        import jax.numpy as jnp

        weight = jnp.ones_like(values) if sample_weight is None else sample_weight.astype(values.dtype)
        self.total.assign_add(jnp.sum(values * weight))
        self.count.assign_add(jnp.sum(weight))

    def result(self):
        return float(self.total.read_value()) / float(self.count.read_value())

    def reset_state(self):
        self.total.assign(0.0)
        self.count.assign(0.0)


class SparseCategoricalAccuracy(Mean):
    def update_state(self, labels, logits, sample_weight=None):
        import jax.numpy as jnp

        correct = (jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32)
        super().update_state(correct, sample_weight)


def main(argv=None):
    args = parse_args(argv)
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               f" --xla_force_host_platform_device_count={args.devices}").strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jaxfeed import distribute as jd
    from jaxfeed.pipeline import Dataset

    strategy = jd.MirroredStrategy(jax.local_devices()[:args.devices])
    print(f"Number of devices: {strategy.num_replicas_in_sync}")

    (train_x, train_y), (test_x, test_y) = make_data()
    BUFFER_SIZE = len(train_x)
    BATCH_SIZE_PER_REPLICA = args.batch_per_replica
    GLOBAL_BATCH_SIZE = BATCH_SIZE_PER_REPLICA * strategy.num_replicas_in_sync
    EPOCHS = args.epochs

    train_dataset = Dataset.from_tensor_slices((train_x, train_y)).shuffle(BUFFER_SIZE, seed=42).batch(
        GLOBAL_BATCH_SIZE)
    test_dataset = Dataset.from_tensor_slices((test_x, test_y)).batch(GLOBAL_BATCH_SIZE)
    train_dist_dataset = strategy.experimental_distribute_dataset(train_dataset)
    test_dist_dataset = strategy.experimental_distribute_dataset(test_dataset)

    rng = np.random.default_rng(1)
    hidden, classes = 32, 3
    init = [rng.normal(size=(train_x.shape[1], hidden)).astype(np.float32) * 0.3, np.zeros(hidden, np.float32),
            rng.normal(size=(hidden, classes)).astype(np.float32) * 0.3, np.zeros(classes, np.float32)]
    with strategy.scope():
        model = [jd.Variable(v, name=n) for v, n in zip(init, ["w1", "b1", "w2", "b2"])]
        test_loss = Mean(name="test_loss")
        train_accuracy = SparseCategoricalAccuracy(name="train_accuracy")
        test_accuracy = SparseCategoricalAccuracy(name="test_accuracy")

    def compute_loss(labels, logits, mask):
        per_example_loss = per_example_cross_entropy(labels, logits) * mask
        return jnp.sum(per_example_loss) / GLOBAL_BATCH_SIZE  # tf.nn.compute_average_loss

    def train_step(inputs):
        images, labels = inputs
        mask = jd.get_replica_context().example_mask(labels.shape[0]).astype(jnp.float32)  # padding rows: 0
        params = [v.read_value() for v in model]

        def loss_fn(p):
            logits = forward(p, images)
            return compute_loss(labels, logits, mask), logits

        (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        grads = jd.get_replica_context().all_reduce(jd.ReduceOp.SUM, grads)  # optimizer.apply_gradients
        for v, g in zip(model, grads):
            v.assign_sub(args.lr * g)
        train_accuracy.update_state(labels, logits, sample_weight=mask)
        return loss

    def test_step(inputs):
        images, labels = inputs
        mask = jd.get_replica_context().example_mask(labels.shape[0])
        logits = forward([v.read_value() for v in model], images)
        t_loss = per_example_cross_entropy(labels, logits)
        test_loss.update_state(t_loss, sample_weight=mask)
        test_accuracy.update_state(labels, logits, sample_weight=mask)

    def distributed_train_step(dataset_inputs):
        per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
        return strategy.reduce(jd.ReduceOp.SUM, per_replica_losses, axis=None)

    def distributed_test_step(dataset_inputs):
        return strategy.run(test_step, args=(dataset_inputs,))

    history = []
    for epoch in range(EPOCHS):
        total_loss = 0.0
        num_batches = 0
        for x in train_dist_dataset:
            total_loss += float(distributed_train_step(x))
            num_batches += 1
        train_loss = total_loss / num_batches

        for x in test_dist_dataset:
            distributed_test_step(x)

        print(f"Epoch {epoch + 1}, Loss: {train_loss:.6f}, Accuracy: {train_accuracy.result() * 100:.4f}, "
              f"Test Loss: {test_loss.result():.6f}, Test Accuracy: {test_accuracy.result() * 100:.4f}")
        history.append({"train_loss": train_loss, "train_accuracy": train_accuracy.result(),
                        "test_loss": test_loss.result(), "test_accuracy": test_accuracy.result(),
                        "train_examples": float(train_accuracy.count.read_value()),
                        "test_examples": float(test_loss.count.read_value()),
                        "test_accuracy_examples": float(test_accuracy.count.read_value()),
                        "train_steps": num_batches})
        test_loss.reset_state()
        train_accuracy.reset_state()
        test_accuracy.reset_state()

    result = {"replicas": strategy.num_replicas_in_sync, "global_batch_size": GLOBAL_BATCH_SIZE,
              "history": history, "params": [np.asarray(v.numpy()).tolist() for v in model]}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f)
    return result


if __name__ == "__main__":
    main()
    sys.exit(0)
