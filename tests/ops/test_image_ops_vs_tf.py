"""``jaxfeed.ops`` against tf.image / tf.io outputs recorded by ``record_goldens.py`` (TensorFlow 2.21).

Tolerances (also in docs/porting.md): resize, crops, flips, standardisation and dtype conversion within
float32 rounding (1e-3 on a 0..255 scale, 1e-5 on standardised values; nearest exact); PNG decoding exact;
JPEG decoding within a few levels (Pillow's accurate DCT against TF's fast DCT)."""

import os

import numpy as np
import pytest

pytest.importorskip("PIL")

from jaxfeed import ops  # noqa: E402

GOLD = np.load(os.path.join(os.path.dirname(__file__), "goldens", "image_ops.npz"))
RESIZES = [((17, 23), (8, 11)), ((17, 23), (34, 40)), ((17, 23), (17, 5)), ((9, 9), (4, 13)), ((30, 20), (7, 7))]
METHODS = [("bilinear", False), ("bilinear", True), ("area", False), ("nearest", False)]
JPEG_TOLERANCE = 6  # measured max |difference| here: see test_jpeg_decoding_is_within_a_few_levels


@pytest.mark.parametrize("shapes", RESIZES, ids=lambda s: f"{s[0]}->{s[1]}")
@pytest.mark.parametrize("method,antialias", METHODS)
def test_resize_matches_tf_image_resize(shapes, method, antialias):
    (h, w), (th, tw) = shapes
    want = GOLD[f"resize_{h}x{w}_{th}x{tw}_{method}_{int(antialias)}"]
    got = ops.resize(GOLD[f"img_{h}x{w}"], (th, tw), method=method, antialias=antialias)
    assert got.shape == want.shape and got.dtype == want.dtype
    if method == "nearest":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, atol=1e-3, rtol=0)


@pytest.mark.parametrize("shapes", RESIZES, ids=lambda s: f"{s[0]}->{s[1]}")
def test_resize_preserving_the_aspect_ratio_matches_tf(shapes):
    (h, w), (th, tw) = shapes
    want = GOLD[f"resize_keep_{h}x{w}_{th}x{tw}"]
    got = ops.resize(GOLD[f"img_{h}x{w}"], (th, tw), preserve_aspect_ratio=True)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=1e-3, rtol=0)


def test_resize_takes_batches_like_single_images():
    img = GOLD["img_17x23"]
    batch = np.stack([img, img[::-1]])
    got = ops.resize(batch, (8, 11), antialias=True)
    np.testing.assert_allclose(got[0], GOLD["resize_17x23_8x11_bilinear_1"], atol=1e-3, rtol=0)
    np.testing.assert_allclose(got[1], ops.resize(img[::-1], (8, 11), antialias=True), atol=1e-6, rtol=0)


@pytest.mark.parametrize("fraction", [0.5, 0.33, 0.9])
def test_central_crop_matches_tf(fraction):
    np.testing.assert_array_equal(ops.central_crop(GOLD["img_17x23"], fraction), GOLD[f"central_crop_{fraction}"])


def test_flips_standardization_and_dtype_conversion_match_tf():
    img = GOLD["img_17x23"]
    np.testing.assert_array_equal(ops.flip_left_right(img), GOLD["flip_lr"])
    np.testing.assert_array_equal(ops.flip_up_down(img), GOLD["flip_ud"])
    np.testing.assert_allclose(ops.per_image_standardization(img), GOLD["standardized"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(ops.per_image_standardization(np.full((4, 4, 3), 7, np.uint8)),
                               GOLD["standardized_const"], atol=1e-6, rtol=0)
    np.testing.assert_allclose(ops.convert_image_dtype(img, np.float32), GOLD["to_float"], atol=1e-7, rtol=0)
    np.testing.assert_array_equal(ops.convert_image_dtype(GOLD["floats"], np.uint8), GOLD["to_uint8"])
    np.testing.assert_array_equal(ops.convert_image_dtype(img, np.uint16), GOLD["to_uint16"])


def test_png_decoding_is_exact():
    png = GOLD["png_bytes"].tobytes()
    np.testing.assert_array_equal(ops.decode_png(png), GOLD["png_decoded"])
    np.testing.assert_array_equal(ops.decode_png(png, channels=1), GOLD["png_decoded_gray"])
    np.testing.assert_array_equal(ops.decode_png(png, dtype=np.uint16), GOLD["png_decoded_16"])
    np.testing.assert_allclose(ops.decode_image(png, dtype=np.float32), GOLD["image_decoded_float"], atol=1e-7)


def _max_diff(a, b):
    assert a.shape == b.shape, (a.shape, b.shape)
    return int(np.abs(a.astype(np.int32) - b.astype(np.int32)).max())


def test_jpeg_decoding_is_within_a_few_levels():
    jpeg = GOLD["jpeg_bytes"].tobytes()
    assert _max_diff(ops.decode_jpeg(jpeg), GOLD["jpeg_decoded"]) <= JPEG_TOLERANCE
    assert _max_diff(ops.decode_jpeg(jpeg, channels=1), GOLD["jpeg_decoded_gray"]) <= JPEG_TOLERANCE
    assert _max_diff(ops.decode_jpeg(jpeg, ratio=2), GOLD["jpeg_decoded_ratio2"]) <= JPEG_TOLERANCE
    assert _max_diff(ops.decode_and_crop_jpeg(jpeg, [3, 5, 10, 20]), GOLD["jpeg_crop"]) <= JPEG_TOLERANCE
