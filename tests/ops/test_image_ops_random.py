"""The random image ops: stateless (the same seed gives the same result anywhere), the distributions
tf.image documents, TF's argument errors, and TF's crop search rules for sample_distorted_bounding_box."""

import numpy as np
import pytest

pytest.importorskip("PIL")

from jaxfeed import ops  # noqa: E402
from jaxfeed.pipeline import Dataset  # noqa: E402
from jaxfeed.pipeline.errors import InvalidArgumentError  # noqa: E402

IMG = np.arange(5 * 7 * 3, dtype=np.uint8).reshape(5, 7, 3)


def test_random_ops_are_functions_of_their_seed():
    for op in (lambda s: ops.random_flip_left_right(IMG, s), lambda s: ops.random_crop(IMG, (3, 4, 3), s),
               lambda s: ops.sample_distorted_bounding_box((50, 70, 3), [], s, use_image_if_no_bounding_boxes=True)):
        a, b = op((1, 2)), op((1, 2))
        for x, y in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
            np.testing.assert_array_equal(x, y)


def test_a_with_rng_map_gets_the_same_augmentation_under_any_parallelism():
    ds = Dataset.from_tensors(IMG).repeat(16)

    def augment(image, rng):
        return ops.random_crop(ops.random_flip_left_right(image, rng), (3, 3, 3), rng)

    one = ds.map(augment, with_rng=True, seed=3).as_numpy()
    four = ds.map(augment, with_rng=True, seed=3, num_parallel_calls=4).as_numpy()
    assert all((a == b).all() for a, b in zip(one, four))
    assert len({a.tobytes() for a in one}) > 1  # elements differ from each other


def test_random_flip_flips_about_half_the_images_of_a_batch():
    batch = np.stack([IMG] * 400)
    out = ops.random_flip_left_right(batch, (0, 1))
    flipped = np.array([(o == IMG[:, ::-1]).all() for o in out])
    assert all((o == IMG).all() or f for o, f in zip(out, flipped))
    assert 150 < flipped.sum() < 250
    up = ops.random_flip_up_down(IMG, np.random.default_rng(0))
    assert (up == IMG).all() or (up == IMG[::-1]).all()


def test_random_crop_places_crops_uniformly_and_checks_the_size():
    corners = {tuple(np.argwhere(ops.random_crop(np.arange(16).reshape(4, 4), (2, 2), (i, 0)) == 0).tolist()[0])
               if (ops.random_crop(np.arange(16).reshape(4, 4), (2, 2), (i, 0)) == 0).any() else None
               for i in range(200)}
    assert (0, 0) in corners and None in corners  # sometimes at the origin, sometimes elsewhere
    with pytest.raises(InvalidArgumentError):
        ops.random_crop(IMG, (6, 7, 3), (0, 0))


def test_sample_distorted_bounding_box_returns_tfs_begin_size_and_box():
    begin, size, boxes = ops.sample_distorted_bounding_box((60, 80, 3), [[0.1, 0.1, 0.9, 0.9]], (4, 2),
                                                           min_object_covered=0.5)
    assert begin.dtype == size.dtype == np.int32 and boxes.dtype == np.float32
    assert begin[2] == 0 and size[2] == -1 and boxes.shape == (1, 1, 4)
    y, x, h, w = begin[0], begin[1], size[0], size[1]
    assert 0 <= y and 0 <= x and y + h <= 60 and x + w <= 80
    np.testing.assert_allclose(boxes[0, 0], [y / 60, x / 80, (y + h) / 60, (x + w) / 80], rtol=1e-6)


def test_sampled_crops_respect_area_aspect_and_coverage():
    box = (8, 6, 72, 54)  # pixels (x0, y0, x1, y1) of [[0.1, 0.1, 0.9, 0.9]] in 60 (h) x 80 (w)
    for i in range(100):
        begin, size, _ = ops.sample_distorted_bounding_box((60, 80, 3), [[0.1, 0.1, 0.9, 0.9]], (i, 7),
                                                           min_object_covered=0.3, area_range=(0.1, 0.8),
                                                           aspect_ratio_range=(0.5, 2.0))
        h, w = int(size[0]), int(size[1])
        if (h, w) == (60, 80):
            continue  # no crop found in max_attempts: the whole image, as in TF
        assert 0.1 * 4800 <= h * w <= 0.8 * 4800
        assert 0.5 - 0.05 <= w / h <= 2.0 + 0.05  # rounding of integer sides
        y0, x0 = int(begin[0]), int(begin[1])
        inter = max(0, min(x0 + w, box[2]) - max(x0, box[0])) * max(0, min(y0 + h, box[3]) - max(y0, box[1]))
        assert inter / ((box[2] - box[0]) * (box[3] - box[1])) >= 0.3


def test_sample_distorted_bounding_box_errors_as_tf():
    with pytest.raises(InvalidArgumentError, match="No bounding boxes"):
        ops.sample_distorted_bounding_box((10, 10, 3), np.zeros((0, 4)), (0, 0))
    with pytest.raises(InvalidArgumentError):
        ops.sample_distorted_bounding_box((10, 10, 3), [[0, 0, 1, 1]], (0, 0), area_range=(0.5, 0.2))


def test_argument_errors():
    with pytest.raises(ValueError):
        ops.central_crop(IMG, 0.0)
    with pytest.raises(ValueError):
        ops.resize(IMG, (4, 4), method="lanczos9")
    with pytest.raises(ValueError):
        ops.crop_to_bounding_box(IMG, 3, 0, 4, 2)
    with pytest.raises(ValueError):
        ops.random_flip_left_right(IMG, "seed")
    with pytest.raises(InvalidArgumentError):
        ops.decode_jpeg(b"not a jpeg")
    with pytest.raises(InvalidArgumentError):
        ops.decode_png(None)
    with pytest.raises(InvalidArgumentError):
        ops.decode_and_crop_jpeg(ops.encode_jpeg(IMG), [0, 0, 9, 9])


def test_encoders_round_trip():
    np.testing.assert_array_equal(ops.decode_png(ops.encode_png(IMG)), IMG)
    gray16 = (np.arange(20, dtype=np.uint16) * 3000).reshape(4, 5, 1)
    np.testing.assert_array_equal(ops.decode_png(ops.encode_png(gray16), dtype=np.uint16), gray16)
    assert ops.decode_jpeg(ops.encode_jpeg(IMG, quality=90)).shape == IMG.shape
