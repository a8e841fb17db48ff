"""Image decode + augment throughput: ``jaxfeed.ops`` against ``tf.image`` on the same JPEG files, one run.

The work per image is the Inception-style training transform real pipelines use: decode a 256x256 JPEG,
``sample_distorted_bounding_box``, crop, resize to 224x224 (bilinear), random left-right flip, scale to
[0, 1] floats. jaxfeed runs it here; TensorFlow runs the same transform on the same bytes in the peer
Python (``--peer-python``), started from here, in the same run. Times are CPU seconds of the process
doing the work (``time.process_time``, one core: TF's intra-op threads are limited to one), so the
ratio is per-core cost, robust to other load on the machine.

``python -m jaxfeed.bench.images [--images 200] [--peer-python PY]`` prints the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np

SIZE = 256
OUT = 224
MARKER = "JAXFEED_IMAGES_RESULT "


def make_jpegs(count: int) -> list[bytes]:
    """Smooth synthetic photos (gradients plus low noise: JPEG-compressible like real images)."""
    from jaxfeed import ops

    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32)
    out = []
    for i in range(count):
        a, b, c = rng.uniform(0.2, 1.0, 3)
        img = np.stack([yy * a, xx * b, (yy + xx) * c / 2], axis=-1) + rng.normal(0, 6, (SIZE, SIZE, 3))
        out.append(ops.encode_jpeg(np.clip(img, 0, 255).astype(np.uint8), quality=90))
    return out


def jaxfeed_transform(data: bytes, seed):
    from jaxfeed import ops

    image = ops.decode_jpeg(data, channels=3)
    begin, size, _ = ops.sample_distorted_bounding_box(image.shape, np.zeros((0, 4)), seed,
                                                       min_object_covered=0.1, area_range=(0.08, 1.0),
                                                       aspect_ratio_range=(3 / 4, 4 / 3),
                                                       use_image_if_no_bounding_boxes=True)
    crop = image[begin[0]:begin[0] + size[0], begin[1]:begin[1] + size[1]]
    resized = ops.resize(crop, (OUT, OUT))
    return ops.random_flip_left_right(resized, seed) / np.float32(255.0)


def time_jaxfeed(jpegs: list[bytes], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        for i, data in enumerate(jpegs):
            jaxfeed_transform(data, (i, 0))
        best = min(best, time.process_time() - start)
    return best


_TF_SCRIPT = r"""
import json, sys, time
import numpy as np
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
jpegs = [bytes.fromhex(h) for h in json.load(sys.stdin)]
repeats = int(sys.argv[1])

def transform(data, seed):
    image = tf.io.decode_jpeg(data, channels=3)
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        tf.shape(image), tf.zeros((1, 0, 4)), seed, min_object_covered=0.1, area_range=(0.08, 1.0),
        aspect_ratio_range=(3 / 4, 4 / 3), use_image_if_no_bounding_boxes=True)
    crop = tf.slice(image, begin, size)
    resized = tf.image.resize(crop, (224, 224))
    return tf.image.stateless_random_flip_left_right(resized, seed) / 255.0

for i, d in enumerate(jpegs[:5]):
    transform(d, (i, 0))  # warm-up
best = float("inf")
for _ in range(repeats):
    start = time.process_time()
    for i, d in enumerate(jpegs):
        transform(d, (i, 0)).numpy()
    best = min(best, time.process_time() - start)
print("JAXFEED_IMAGES_RESULT " + json.dumps({"seconds": best, "tensorflow": tf.__version__}))
"""


def time_tensorflow(jpegs: list[bytes], repeats: int, peer_python: str) -> dict:
    try:
        proc = subprocess.run([peer_python, "-c", _TF_SCRIPT, str(repeats)], input=json.dumps(
            [j.hex() for j in jpegs]), capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"status": "error", "reason": str(e)[:200]}
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(MARKER)), None)
    if line is None:
        tail = " | ".join(proc.stderr.strip().splitlines()[-2:])[-300:]
        missing = "No module named 'tensorflow'" in proc.stderr
        return {"status": "skipped" if missing else "error",
                "reason": f"tensorflow is not installed in {peer_python}" if missing else tail}
    return {"status": "ok", **json.loads(line[len(MARKER):])}


def run(images: int = 200, repeats: int = 3, peer_python: str | None = None) -> dict:
    jpegs = make_jpegs(images)
    jaxfeed_s = time_jaxfeed(jpegs, repeats)
    out = {"images": images, "size": SIZE, "out": OUT, "repeats": repeats, "clock": "process_time",
           "jaxfeed_images_per_s": images / jaxfeed_s}
    if peer_python:
        tf = time_tensorflow(jpegs, repeats, peer_python)
        out["tensorflow"] = tf
        if tf["status"] == "ok":
            out["tf_images_per_s"] = images / tf["seconds"]
            out["jaxfeed_vs_tf"] = out["jaxfeed_images_per_s"] / out["tf_images_per_s"]
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--images", type=int, default=200)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--peer-python", default=None, help="a Python with tensorflow-cpu for the tf.image side")
    args = p.parse_args(argv)
    print(json.dumps(run(args.images, args.repeats, args.peer_python), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
