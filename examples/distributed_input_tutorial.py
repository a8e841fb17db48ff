"""The tf.distribute distributed-input tutorial (tensorflow.org/tutorials/distribute/input) on jaxfeed and JAX,
section by section, on 2 forced CPU devices as the tutorial's 2 virtual CPUs.

    python examples/distributed_input_tutorial.py [--out result.json]

Each section prints what the tutorial prints (per-replica values as lists, padding removed) and records it
in the JSON result, which tests/test_tutorial_examples.py compares with TF's output. The tutorial's Keras
``StringLookup`` preprocessing layer is a small numpy class here (same vocabulary and out-of-vocabulary
index 0); everything else is the tutorial's code with ``tf.data``/``tf.distribute`` replaced by
``jaxfeed.pipeline``/``jaxfeed.distribute``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

N_VIRTUAL_DEVICES = 2


def local(strategy, value):
    """A per-replica value as one list per local replica (TF prints the replicas' tensors)."""
    import numpy as np

    return [np.asarray(v).tolist() for v in strategy.experimental_local_results(value)]


class StringLookup:
    """tf.keras.layers.StringLookup(vocabulary=vocab): index 0 for out-of-vocabulary strings, then the
    vocabulary from 1; int64 indices."""

    def __init__(self, vocabulary):
        self.vocabulary = [v.encode() if isinstance(v, str) else bytes(v) for v in vocabulary]
        self._index = {v: i + 1 for i, v in enumerate(self.vocabulary)}

    def __call__(self, strings):
        import numpy as np

        flat = np.asarray(strings, dtype=object).reshape(-1)
        out = np.fromiter((self._index.get(bytes(s), 0) for s in flat), dtype=np.int64, count=len(flat))
        return out.reshape(np.shape(strings))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               f" --xla_force_host_platform_device_count={N_VIRTUAL_DEVICES}").strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    from jaxfeed import distribute as jd
    from jaxfeed.pipeline import AutoShardPolicy, Dataset, Options

    result = {}
    devices = jax.local_devices()[:N_VIRTUAL_DEVICES]

    # ---- Distributed datasets: experimental_distribute_dataset
    global_batch_size = 16
    mirrored_strategy = jd.MirroredStrategy(devices)
    dataset = Dataset.from_tensors(([1.], [1.])).repeat(100).batch(global_batch_size)
    dist_dataset = mirrored_strategy.experimental_distribute_dataset(dataset)
    first = next(iter(dist_dataset))  # 1 global batch of data fed to the model in 1 step
    print(first)
    features, labels = first
    result["first_step_rows"] = [len(v) for v in local(mirrored_strategy, features)]

    # ---- Sharding options (DATA): one worker keeps everything
    dataset = Dataset.from_tensors(([1.], [1.])).repeat(64).batch(16)
    options = Options()
    options.experimental_distribute.auto_shard_policy = AutoShardPolicy.DATA
    dataset = dataset.with_options(options)
    result["data_sharded_steps"] = sum(1 for _ in mirrored_strategy.experimental_distribute_dataset(dataset))

    # ---- distribute_datasets_from_function
    def dataset_fn(input_context):
        batch_size = input_context.get_per_replica_batch_size(global_batch_size)
        dataset = Dataset.from_tensors(([1.], [1.])).repeat(64).batch(16)
        dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        dataset = dataset.batch(batch_size)
        dataset = dataset.prefetch(2)  # This prefetches 2 batches per device.
        return dataset

    dist_dataset_fn = mirrored_strategy.distribute_datasets_from_function(dataset_fn)
    shapes = []
    for x in dist_dataset_fn:
        features, labels = x
        shapes.append([list(v.shape) for v in mirrored_strategy.experimental_local_results(features)])
    result["from_function_shapes"] = shapes

    # ---- Distributed iterators: a Pythonic for loop
    dataset = Dataset.from_tensors(([1.], [1.])).repeat(100).batch(global_batch_size)
    dist_dataset = mirrored_strategy.experimental_distribute_dataset(dataset)

    def train_step(inputs):
        features, labels = inputs
        return labels - 0.3 * features

    losses = []
    for x in dist_dataset:
        loss = mirrored_strategy.run(train_step, args=(x,))  # train_step trains the model using the elements
        print("Loss is ", loss)
        losses.append(local(mirrored_strategy, loss))
    result["for_loop_losses"] = losses

    # ---- iter() and next() for a fixed number of steps
    num_epochs = 10
    steps_per_epoch = 5
    steps = 0
    for epoch in range(num_epochs):
        dist_iterator = iter(dist_dataset)
        for step in range(steps_per_epoch):
            loss = mirrored_strategy.run(train_step, args=(next(dist_iterator),))
            # which is the same as
            # loss = mirrored_strategy.run(train_step, args=(dist_iterator.get_next(),))
            steps += 1
        dist_iterator.close()
    result["iter_next_steps"] = steps

    # ---- get_next_as_optional: stop at the end without an OutOfRange error
    global_batch_size = 4
    steps_per_loop = 5
    strategy = jd.MirroredStrategy(devices)
    dataset = Dataset.range(9).batch(global_batch_size)
    distributed_iterator = iter(strategy.experimental_distribute_dataset(dataset))

    def train_fn(distributed_iterator):
        printed = []
        for _ in range(steps_per_loop):
            optional_data = distributed_iterator.get_next_as_optional()
            if not optional_data.has_value():
                break
            per_replica_results = strategy.run(lambda x: x, args=(optional_data.get_value(),))
            print(tuple(local(strategy, per_replica_results)))
            printed.append(local(strategy, per_replica_results))
        return printed

    result["optional_loop"] = train_fn(distributed_iterator)

    # ---- element_spec
    global_batch_size = 16
    epochs = 5
    steps_per_epoch = 5
    dataset = Dataset.from_tensors(([1.], [1.])).repeat(100).batch(global_batch_size)
    dist_dataset = mirrored_strategy.experimental_distribute_dataset(dataset)
    result["element_spec"] = repr(dist_dataset.element_spec)

    def train_step_2(per_replica_inputs):
        def step_fn(inputs):
            return 2 * inputs

        return mirrored_strategy.run(step_fn, args=(per_replica_inputs,))

    outputs = []
    for _ in range(epochs):
        iterator = iter(dist_dataset)
        for _ in range(steps_per_epoch):
            output = train_step_2(next(iterator))
            outputs.append(output)
        iterator.close()
    # inputs is the (features, labels) tuple, so 2 * inputs repeats it: TF's output is a 4-tuple too
    result["element_spec_output_len"] = len(outputs[-1])
    result["element_spec_last_output"] = local(mirrored_strategy, outputs[-1][0])

    # ---- Preprocessing with a custom training loop (distribute_datasets_from_function)
    strategy = jd.MirroredStrategy(devices)
    vocab = ["a", "b", "c", "d", "f"]

    with strategy.scope():
        layer = StringLookup(vocabulary=vocab)  # Create the layer(s) under scope.

    def dataset_fn_2(input_context):
        dataset = Dataset.from_tensor_slices(["a", "c", "e"]).repeat()  # a Dataset of strings

        # Custom your batching, sharding, prefetching, etc.
        global_batch_size = 4
        batch_size = input_context.get_per_replica_batch_size(global_batch_size)
        dataset = dataset.batch(batch_size)
        dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)

        def preprocess_with_kpl(input):  # Apply the preprocessing layer(s) to the Dataset
            return layer(input)

        processed_ds = dataset.map(preprocess_with_kpl)
        return processed_ds

    distributed_dataset = strategy.distribute_datasets_from_function(dataset_fn_2)

    # Print out a few example batches.
    distributed_dataset_iterator = iter(distributed_dataset)
    batches = []
    for _ in range(3):
        batch = next(distributed_dataset_iterator)
        print(batch)
        batches.append(local(strategy, batch))
    distributed_dataset_iterator.close()
    result["preprocessed_batches"] = batches

    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f)
    return result


if __name__ == "__main__":
    main()
    sys.exit(0)
