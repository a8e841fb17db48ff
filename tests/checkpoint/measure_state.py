"""Measure iterator state sizes and save/restore cost for typical pipelines (README "Checkpointing").

    .venv/bin/python tests/checkpoint/measure_state.py

For each pipeline: read some elements, then time get_state, serialize, deserialize and restoring a new
iterator up to its first element (median of 5), and report the serialized size.
"""

import os
import statistics
import sys
import tempfile
import time

import numpy as np

from jaxfeed.pipeline import AUTOTUNE, Dataset, checkpoint


def median_ms(fn, repeat=5):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def pipelines(tmp):
    images = np.random.default_rng(0).integers(0, 255, (10_000, 32, 32, 3), dtype=np.uint8)
    labels = np.arange(10_000, dtype=np.int64) % 10
    yield "range(1M) -> map -> batch(256)", lambda: Dataset.range(1_000_000).map(lambda x: x * 2).batch(256), 10
    yield ("tensor_slices(10k images) -> shuffle(10k) -> batch(128)  [index shuffle]",
           lambda: Dataset.from_tensor_slices((images, labels)).shuffle(10_000, seed=1).batch(128), 10)
    yield ("tensor_slices(10k images) -> map -> shuffle(10k) -> batch(128)  [element buffer]",
           lambda: Dataset.from_tensor_slices((images, labels)).map(lambda x, y: (x, y))
           .shuffle(10_000, seed=1).batch(128), 10)
    yield ("range -> map(num_parallel_calls=4) -> batch(64) -> prefetch(8)",
           lambda: Dataset.range(1_000_000).map(lambda x: x + 1, num_parallel_calls=4).batch(64).prefetch(8), 10)
    yield ("range -> map(AUTOTUNE) -> batch(64) -> prefetch(AUTOTUNE)",
           lambda: Dataset.range(1_000_000).map(lambda x: x + 1, num_parallel_calls=AUTOTUNE).batch(64)
           .prefetch(AUTOTUNE), 10)
    try:
        from jaxfeed.formats.tfrecord import frame_many
        from jaxfeed.formats.tfrecord_dataset import TFRecordDataset
    except ImportError:
        return
    paths = []
    for f in range(4):
        p = os.path.join(tmp, f"data-{f}.tfrecord")
        with open(p, "wb") as out:
            out.write(frame_many([os.urandom(100) for _ in range(10_000)]))
        paths.append(p)
    yield "TFRecordDataset(1 file) -> batch(32)", lambda: TFRecordDataset(paths[:1]).batch(32), 10
    yield ("list of 4 TFRecord files -> interleave(cycle 4) -> shuffle(1000) -> batch(32)",
           lambda: Dataset.from_tensor_slices(np.array(paths, dtype=object)).interleave(
               TFRecordDataset, cycle_length=4).shuffle(1000, seed=1).batch(32), 50)


def main():
    tmp = tempfile.mkdtemp()
    print(f"{'pipeline':<86} {'bytes':>10} {'get_state':>9} {'serialize':>9} {'deser.':>7} {'restore+1st':>11}  (ms)")
    for name, make, steps in pipelines(tmp):
        it = iter(make())
        for _ in range(steps):
            next(it)
        state = it.get_state()
        data = checkpoint.serialize(state)
        t_get = median_ms(it.get_state)
        t_ser = median_ms(lambda: checkpoint.serialize(state))
        t_de = median_ms(lambda: checkpoint.deserialize(data))

        def restore():
            r = make().make_iterator(state=data)
            next(r)
            r.close()
        t_res = median_ms(restore)
        it.close()
        print(f"{name:<86} {len(data):>10,} {t_get:>9.2f} {t_ser:>9.2f} {t_de:>7.2f} {t_res:>11.2f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
