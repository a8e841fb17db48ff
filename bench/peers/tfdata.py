"""tf.data versions of the suite (``python -m jaxfeed.bench.peers.tfdata P1 <datadir>``).

Idiomatic tf.data: functions are TensorFlow ops traced once (C++ per element), except P5's variant that
calls the same Python function through ``tf.numpy_function``. Where batching first and mapping a
vectorised function is the faster tf.data idiom, that variant is measured as well. Batches are read
with ``as_numpy_iterator()`` (jaxfeed yields numpy too). Each dataset is built once and iterated once per
repetition, as a training loop iterates one dataset once per epoch (so does the jaxfeed side).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

from .. import workloads as w
from . import _common

NAME = "tfdata"
UNSUPPORTED = {"P6": "tf.data has no Parquet reader (tensorflow-io is not part of the comparison)",
               "P7": "not compared (tf.distribute)"}


def version():
    import tensorflow as tf

    return tf.__version__


def _tf():
    import tensorflow as tf

    return tf


def p1(sizes, paths):
    tf = _tf()
    n = sizes["p1_n"]
    map_batch = tf.data.Dataset.range(n).map(lambda x: x + 1).batch(w.P1_BATCH)
    batch_map = tf.data.Dataset.range(n).batch(w.P1_BATCH).map(lambda x: x + 1)
    return {"map -> batch": (map_batch.as_numpy_iterator, {}),
            "batch -> vectorised map": (batch_map.as_numpy_iterator, {})}


def p2(sizes, paths):
    tf = _tf()
    rows = np.load(paths["p2"])
    ds = (tf.data.Dataset.from_tensor_slices(rows).shuffle(w.P2_BUFFER, seed=w.SEED).batch(w.P2_BATCH)
          .prefetch(tf.data.AUTOTUNE))
    return {"shuffle -> batch -> prefetch": (ds.as_numpy_iterator, {})}


def p3(sizes, paths):
    tf = _tf()
    AUTOTUNE = tf.data.AUTOTUNE

    def parse(record):
        a = tf.io.decode_raw(record, tf.uint8)
        return a, tf.reduce_sum(tf.cast(a, tf.int64), axis=-1)

    def records():
        return (tf.data.Dataset.from_tensor_slices(paths["p3"])
                .interleave(tf.data.TFRecordDataset, cycle_length=w.P3_CYCLE, num_parallel_calls=AUTOTUNE))

    map_batch = records().map(parse, num_parallel_calls=AUTOTUNE).batch(w.P3_BATCH).prefetch(AUTOTUNE)
    batch_map = records().batch(w.P3_BATCH).map(parse, num_parallel_calls=AUTOTUNE).prefetch(AUTOTUNE)
    info = {"crc": True}
    return {"map(parse) -> batch": (map_batch.as_numpy_iterator, info),
            "batch -> vectorised map": (batch_map.as_numpy_iterator, info)}


def p4(sizes, paths):
    tf = _tf()
    images = np.load(paths["p4"])
    mean = tf.constant(np.array([0.485, 0.456, 0.406], np.float32) * 255.0)
    inv_std = tf.constant(1.0 / (np.array([0.229, 0.224, 0.225], np.float32) * 255.0))

    def augment(index, image):
        image = tf.image.stateless_random_flip_left_right(image, seed=tf.stack([w.SEED, index]))
        return (tf.cast(image, tf.float32) - mean) * inv_std

    ds = (tf.data.Dataset.from_tensor_slices(images).enumerate()
          .map(augment, num_parallel_calls=tf.data.AUTOTUNE).batch(w.P4_BATCH))
    return {"map(tf ops) AUTOTUNE -> batch": (ds.as_numpy_iterator, {})}


def p5(sizes, paths):
    tf = _tf()
    lines = w.read_lines(paths["p5"])

    def tokenize(line):
        ids = tf.numpy_function(w.tokenize, [line], tf.int32)
        return tf.ensure_shape(ids, [w.P5_LENGTH])

    ds = (tf.data.Dataset.from_tensor_slices(lines).map(tokenize, num_parallel_calls=tf.data.AUTOTUNE)
          .batch(w.P5_BATCH))
    return {"map(numpy_function) AUTOTUNE -> batch": (ds.as_numpy_iterator, {"python_function": True})}


PIPELINES = {"P1": p1, "P2": p2, "P3": p3, "P4": p4, "P5": p5}

if __name__ == "__main__":
    sys.exit(_common.main(sys.modules[__name__]))
