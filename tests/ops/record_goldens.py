"""Record tf.image / tf.io goldens for ``jaxfeed.ops`` (run with a Python that has tensorflow-cpu; never a
dependency of the project):

    python tests/ops/record_goldens.py        # writes tests/ops/goldens/image_ops.npz

Inputs are made here from a fixed numpy seed, so the test rebuilds them without TensorFlow.
"""

import os

import numpy as np
import tensorflow as tf

HERE = os.path.dirname(os.path.abspath(__file__))
RESIZES = [((17, 23), (8, 11)), ((17, 23), (34, 40)), ((17, 23), (17, 5)), ((9, 9), (4, 13)), ((30, 20), (7, 7))]
METHODS = [("bilinear", False), ("bilinear", True), ("area", False), ("nearest", False)]


def images():
    rng = np.random.default_rng(1234)
    out = {}
    for h, w in {s for s, _ in RESIZES}:
        out[f"img_{h}x{w}"] = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    # smooth image for JPEG (noise compresses badly and magnifies codec differences)
    yy, xx = np.mgrid[0:32, 0:48]
    smooth = np.stack([(yy * 7 + xx * 3) % 256, (xx * 5) % 256, (yy * 8) % 256], axis=-1).astype(np.uint8)
    out["smooth"] = smooth
    return out


def main():
    data = images()
    gold = dict(data)
    for (h, w), (th, tw) in RESIZES:
        img = data[f"img_{h}x{w}"]
        for method, antialias in METHODS:
            key = f"resize_{h}x{w}_{th}x{tw}_{method}_{int(antialias)}"
            gold[key] = tf.image.resize(img, (th, tw), method=method, antialias=antialias).numpy()
        gold[f"resize_keep_{h}x{w}_{th}x{tw}"] = tf.image.resize(img, (th, tw), preserve_aspect_ratio=True).numpy()
    img = data["img_17x23"]
    for frac in (0.5, 0.33, 0.9):
        gold[f"central_crop_{frac}"] = tf.image.central_crop(img, frac).numpy()
    gold["standardized"] = tf.image.per_image_standardization(img).numpy()
    gold["standardized_const"] = tf.image.per_image_standardization(np.full((4, 4, 3), 7, np.uint8)).numpy()
    gold["flip_lr"] = tf.image.flip_left_right(img).numpy()
    gold["flip_ud"] = tf.image.flip_up_down(img).numpy()
    gold["to_float"] = tf.image.convert_image_dtype(img, tf.float32).numpy()
    floats = np.linspace(0, 1, 50, dtype=np.float32).reshape(5, 10, 1)
    gold["floats"] = floats
    gold["to_uint8"] = tf.image.convert_image_dtype(floats, tf.uint8).numpy()
    gold["to_uint16"] = tf.image.convert_image_dtype(img, tf.uint16).numpy()
    smooth = data["smooth"]
    png = tf.io.encode_png(smooth).numpy()
    jpeg = tf.io.encode_jpeg(smooth, quality=95).numpy()
    gold["png_bytes"] = np.frombuffer(png, np.uint8)
    gold["jpeg_bytes"] = np.frombuffer(jpeg, np.uint8)
    gold["png_decoded"] = tf.io.decode_png(png).numpy()
    gold["png_decoded_gray"] = tf.io.decode_png(png, channels=1).numpy()
    gold["png_decoded_16"] = tf.io.decode_png(png, dtype=tf.uint16).numpy()
    gold["jpeg_decoded"] = tf.io.decode_jpeg(jpeg).numpy()
    gold["jpeg_decoded_gray"] = tf.io.decode_jpeg(jpeg, channels=1).numpy()
    gold["jpeg_decoded_ratio2"] = tf.io.decode_jpeg(jpeg, ratio=2).numpy()
    gold["jpeg_crop"] = tf.image.decode_and_crop_jpeg(jpeg, [3, 5, 10, 20]).numpy()
    gold["image_decoded_float"] = tf.io.decode_image(png, dtype=tf.float32).numpy()
    np.savez_compressed(os.path.join(HERE, "goldens", "image_ops.npz"), **gold)
    print(f"wrote {len(gold)} arrays with TensorFlow {tf.__version__}")


if __name__ == "__main__":
    main()
