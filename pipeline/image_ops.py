"""Image ops for map functions, as ``tf.image`` computes them, on numpy arrays (``jaxfeed.ops``).

Images are ``(height, width, channels)`` arrays, or ``(batch, height, width, channels)`` where tf.image
takes batches. Results match tf.image on the same inputs within the tolerances in ``docs/porting.md``
(tested against TF-recorded goldens in ``tests/ops``): resizing is the same arithmetic (half-pixel centres,
TF's antialiasing kernel spans, TF's area overlaps) done as two small matrix products.

Random ops are stateless: ``seed`` is a pair of ints (as ``tf.image.stateless_*`` take) or a
``numpy.random.Generator`` (the ``rng`` a ``map(..., with_rng=True)`` function receives), so the same
element gets the same augmentation under any parallelism, after a restore, on any host. Draws are not
TensorFlow's (different generators); their distributions are.
"""

from __future__ import annotations

import math

import numpy as np

from .errors import InvalidArgumentError

_RESIZE_METHODS = ("bilinear", "nearest", "area")


# ---------------------------------------------------------------------------------------------- helpers
def rng_of(seed) -> np.random.Generator:
    """A generator from a ``(int, int)`` seed or a Generator (used as is)."""
    if isinstance(seed, np.random.Generator):
        return seed
    arr = np.asarray(seed)
    if arr.shape != (2,) or arr.dtype.kind not in "iu":
        raise ValueError(f"seed must be a pair of integers or a numpy Generator, got {seed!r}")
    return np.random.Generator(np.random.PCG64([int(v) & 0xFFFFFFFFFFFFFFFF for v in arr.tolist()]))


def _image(image, what, ranks=(3, 4)):
    arr = np.asarray(image)
    if arr.ndim not in ranks:
        raise ValueError(f"{what}: 'image' must have rank {' or '.join(map(str, ranks))}, got shape {arr.shape}.")
    return arr


def _hw_axes(arr):
    return (arr.ndim - 3, arr.ndim - 2)


# ---------------------------------------------------------------------------------------------- resize
def resize(images, size, method="bilinear", preserve_aspect_ratio=False, antialias=False):
    """``tf.image.resize``: float32 results (the input dtype for ``nearest``)."""
    arr = _image(images, "resize")
    method = getattr(method, "value", method)
    if method not in _RESIZE_METHODS:
        raise ValueError(f"resize: method {method!r} is not supported; use one of {_RESIZE_METHODS}.")
    target_h, target_w = (int(s) for s in size)
    if target_h <= 0 or target_w <= 0:
        raise ValueError(f"resize: 'size' must be positive, got {tuple(size)}.")
    h_axis, w_axis = _hw_axes(arr)
    in_h, in_w = arr.shape[h_axis], arr.shape[w_axis]
    if preserve_aspect_ratio:
        scale = min(target_h / in_h, target_w / in_w)
        target_h = max(int(np.round(np.float32(scale * in_h))), 1)
        target_w = max(int(np.round(np.float32(scale * in_w))), 1)
    if method == "nearest":
        rows = _nearest_indices(in_h, target_h)
        cols = _nearest_indices(in_w, target_w)
        return np.take(np.take(arr, rows, axis=h_axis), cols, axis=w_axis)
    weights = {"bilinear": _antialiased_weights if antialias else _bilinear_weights, "area": _area_weights}[method]
    x = arr.astype(np.float32, copy=False)
    x = _resample(x, weights(in_h, target_h), h_axis)
    x = _resample(x, weights(in_w, target_w), w_axis)
    return np.ascontiguousarray(x, dtype=np.float32)


def _resample(x, w, axis):
    """``w @ x`` along ``axis`` for a banded ``w`` (each output row reads a few neighbouring inputs): one
    gather and multiply-add per tap, O(output x taps) instead of a dense product."""
    nonzero = w != 0
    first = np.where(nonzero.any(axis=1), nonzero.argmax(axis=1), 0)
    last = w.shape[1] - 1 - np.where(nonzero.any(axis=1), nonzero[:, ::-1].argmax(axis=1), w.shape[1] - 1)
    taps = max(int((last - first).max()) + 1, 1)  # the widest band, zeros inside it included
    shape = [1] * x.ndim
    shape[axis] = w.shape[0]
    out = None
    for t in range(taps):
        idx = np.minimum(first + t, w.shape[1] - 1)
        wt = np.where(first + t < w.shape[1], w[np.arange(w.shape[0]), idx], 0).astype(np.float32)
        term = np.take(x, idx, axis=axis) * wt.reshape(shape)
        out = term if out is None else out + term
    return out


def _nearest_indices(in_size, out_size):
    scale = np.float32(in_size / out_size)
    idx = np.floor((np.arange(out_size, dtype=np.float32) + np.float32(0.5)) * scale).astype(np.int64)
    return np.clip(idx, 0, in_size - 1)


def _bilinear_weights(in_size, out_size):
    """TF's ResizeBilinear with half-pixel centres: source ``(i + 0.5) * scale - 0.5``, clamped."""
    scale = np.float32(in_size / out_size)
    src = (np.arange(out_size, dtype=np.float32) + np.float32(0.5)) * scale - np.float32(0.5)
    floor = np.floor(src)
    lower = np.maximum(floor, 0).astype(np.int64)
    upper = np.minimum(np.ceil(src), in_size - 1).astype(np.int64)
    lerp = (src - floor).astype(np.float32)
    w = np.zeros((out_size, in_size), np.float32)
    rows = np.arange(out_size)
    np.add.at(w, (rows, lower), 1 - lerp)
    np.add.at(w, (rows, upper), lerp)
    return w


def _antialiased_weights(in_size, out_size):
    """TF's ScaleAndTranslate spans with the triangle kernel (``resize(..., antialias=True)``)."""
    inv_scale = np.float32(in_size) / np.float32(out_size)
    kernel_scale = max(float(inv_scale), 1.0)
    w = np.zeros((out_size, in_size), np.float32)
    for x in range(out_size):
        sample = (x + 0.5) * float(inv_scale)
        if sample < 0 or sample > in_size:
            continue
        start = min(max(math.ceil(sample - kernel_scale - 0.5), 0), in_size - 1)
        end = min(max(math.floor(sample + kernel_scale - 0.5), 0), in_size - 1) + 1
        src = np.arange(start, end, dtype=np.float64)
        weights = np.maximum(0.0, 1.0 - np.abs((src + 0.5 - sample) / kernel_scale)).astype(np.float32)
        total = weights.sum(dtype=np.float32)
        if abs(total) >= 1000.0 * np.finfo(np.float32).tiny:
            w[x, start:end] = weights / total
    return w


def _area_weights(in_size, out_size):
    """TF's ResizeArea: each output cell averages the input cells it overlaps, by overlap length."""
    scale = in_size / out_size
    w = np.zeros((out_size, in_size), np.float32)
    for y in range(out_size):
        lo, hi = y * scale, (y + 1) * scale
        for i in range(int(math.floor(lo)), int(math.ceil(hi))):
            overlap = min(i + 1, hi) - max(i, lo)
            if overlap > 0:
                w[y, min(i, in_size - 1)] += overlap / scale
    return w


# ---------------------------------------------------------------------------------------------- crops
def central_crop(image, central_fraction):
    """``tf.image.central_crop``: the centre ``central_fraction`` of each side."""
    arr = _image(image, "central_crop")
    if not 0.0 < central_fraction <= 1.0:
        raise ValueError("central_fraction must be within (0, 1]")
    if central_fraction == 1.0:
        return arr
    h_axis, w_axis = _hw_axes(arr)
    h, w = arr.shape[h_axis], arr.shape[w_axis]
    top = int((h - h * central_fraction) / 2)
    left = int((w - w * central_fraction) / 2)
    return crop_to_bounding_box(arr, top, left, h - 2 * top, w - 2 * left)


def crop_to_bounding_box(image, offset_height, offset_width, target_height, target_width):
    """``tf.image.crop_to_bounding_box``."""
    arr = _image(image, "crop_to_bounding_box")
    h_axis, w_axis = _hw_axes(arr)
    h, w = arr.shape[h_axis], arr.shape[w_axis]
    if offset_height < 0 or offset_width < 0:
        raise ValueError("offset_height and offset_width must be >= 0.")
    if target_height <= 0 or target_width <= 0:
        raise ValueError("target_height and target_width must be > 0.")
    if offset_height + target_height > h or offset_width + target_width > w:
        raise ValueError(f"the crop ({offset_height}+{target_height}, {offset_width}+{target_width}) does not fit "
                         f"the image ({h}, {w}).")
    index = [slice(None)] * arr.ndim
    index[h_axis] = slice(offset_height, offset_height + target_height)
    index[w_axis] = slice(offset_width, offset_width + target_width)
    return arr[tuple(index)]


def random_crop(value, size, seed):
    """``tf.image.stateless_random_crop``: a uniformly placed ``size`` slice of ``value`` (any rank)."""
    arr = np.asarray(value)
    size = tuple(int(s) for s in size)
    if len(size) != arr.ndim or any(s > d or s < 0 for s, d in zip(size, arr.shape)):
        raise InvalidArgumentError(f"random_crop: need value.shape >= size, got {arr.shape} and {size}.",
                                   "random_crop")
    rng = rng_of(seed)
    offsets = [int(rng.integers(0, d - s + 1)) for d, s in zip(arr.shape, size)]
    return arr[tuple(slice(o, o + s) for o, s in zip(offsets, size))]


def sample_distorted_bounding_box(image_size, bounding_boxes, seed, min_object_covered=0.1,
                                  aspect_ratio_range=(0.75, 1.33), area_range=(0.05, 1.0), max_attempts=100,
                                  use_image_if_no_bounding_boxes=False):
    """``tf.image.stateless_sample_distorted_bounding_box``: TF's Inception-style crop search, returning
    ``(begin, size, bboxes)`` as TF does: ``begin = [y, x, 0]``, ``size = [h, w, -1]`` (int32) and the crop
    as a normalised ``[[[ymin, xmin, ymax, xmax]]]`` box (float32)."""
    height, width = int(image_size[0]), int(image_size[1])
    boxes = np.asarray(bounding_boxes, dtype=np.float32).reshape(-1, 4)
    if not 0.0 < area_range[0] <= area_range[1] <= 1.0:
        raise InvalidArgumentError(f"area_range must be within (0, 1] and ordered, got {area_range}.",
                                   "sample_distorted_bounding_box")
    if not 0.0 < aspect_ratio_range[0] <= aspect_ratio_range[1]:
        raise InvalidArgumentError(f"aspect_ratio_range must be positive and ordered, got {aspect_ratio_range}.",
                                   "sample_distorted_bounding_box")
    if len(boxes) == 0:
        if not use_image_if_no_bounding_boxes:
            raise InvalidArgumentError("No bounding boxes provided as input. One must enable "
                                       "use_image_if_no_bounding_boxes if you wish to not provide any bounding "
                                       "boxes.", "sample_distorted_bounding_box")
        boxes = np.array([[0.0, 0.0, 1.0, 1.0]], np.float32)
    pixel_boxes = [(int(b[1] * width), int(b[0] * height), int(b[3] * width), int(b[2] * height)) for b in boxes]
    rng = rng_of(seed)
    crop = None
    for _ in range(int(max_attempts)):
        ratio = float(rng.uniform(aspect_ratio_range[0], aspect_ratio_range[1]))
        rect = _random_crop_rect(rng, width, height, area_range[0], area_range[1], ratio)
        if rect is not None and _covers(rect, min_object_covered, pixel_boxes):
            crop = rect
            break
    if crop is None:
        crop = (0, 0, width, height)
    x0, y0, x1, y1 = crop
    begin = np.array([y0, x0, 0], np.int32)
    size = np.array([y1 - y0, x1 - x0, -1], np.int32)
    bboxes = np.array([[[y0 / height, x0 / width, y1 / height, x1 / width]]], np.float32)
    return begin, size, bboxes


def _lrint(v: float) -> int:
    return int(np.rint(np.float32(v)))


def _random_crop_rect(rng, width, height, min_area_frac, max_area_frac, ratio):
    """TF's ``GenerateRandomCrop``: a crop of ``ratio`` whose area lies in the range, or None."""
    min_area = min_area_frac * width * height
    max_area = max_area_frac * width * height
    h = _lrint(math.sqrt(min_area / ratio))
    max_h = _lrint(math.sqrt(max_area / ratio))
    if _lrint(max_h * ratio) > width:
        max_h = int((width + 0.5 - 1e-7) / ratio)
        if _lrint(max_h * ratio) > width:
            max_h -= 1
    max_h = min(max_h, height)
    h = min(h, max_h)
    if h < max_h:
        h += int(rng.integers(0, max_h - h + 1))
    w = _lrint(h * ratio)
    area = w * h
    if area < min_area:
        h += 1
        w = _lrint(h * ratio)
        area = w * h
    if area > max_area:
        h -= 1
        w = _lrint(h * ratio)
        area = w * h
    if area < min_area or area > max_area or w > width or h > height or w <= 0 or h <= 0:
        return None
    y = int(rng.integers(0, height - h)) if h < height else 0
    x = int(rng.integers(0, width - w)) if w < width else 0
    return x, y, x + w, y + h


def _covers(rect, min_object_covered, boxes) -> bool:
    x0, y0, x1, y1 = rect
    for bx0, by0, bx1, by1 in boxes:
        area = (bx1 - bx0) * (by1 - by0)
        if area <= 0:
            continue
        inter = max(0, min(x1, bx1) - max(x0, bx0)) * max(0, min(y1, by1) - max(y0, by0))
        if inter / area >= min_object_covered:
            return True
    return False


# ---------------------------------------------------------------------------------------------- flips
def flip_left_right(image):
    arr = _image(image, "flip_left_right")
    return np.flip(arr, axis=arr.ndim - 2)


def flip_up_down(image):
    arr = _image(image, "flip_up_down")
    return np.flip(arr, axis=arr.ndim - 3)


def random_flip_left_right(image, seed):
    """``tf.image.stateless_random_flip_left_right``: each image of a batch flipped with probability 1/2."""
    return _random_flip(_image(image, "random_flip_left_right"), seed, axis=-2)


def random_flip_up_down(image, seed):
    return _random_flip(_image(image, "random_flip_up_down"), seed, axis=-3)


def _random_flip(arr, seed, axis):
    rng = rng_of(seed)
    if arr.ndim == 3:
        return np.flip(arr, axis=axis) if rng.random() < 0.5 else arr
    flips = rng.random(arr.shape[0]) < 0.5
    out = arr.copy()
    out[flips] = np.flip(arr[flips], axis=axis)
    return out


# ---------------------------------------------------------------------------------------------- values
def per_image_standardization(image):
    """``tf.image.per_image_standardization``: ``(x - mean) / max(stddev, 1/sqrt(N))`` per image, float32."""
    arr = _image(image, "per_image_standardization")
    x = arr.astype(np.float32) if arr.dtype != np.float32 else arr
    axes = tuple(range(arr.ndim - 3, arr.ndim))
    n = np.float32(np.prod([arr.shape[a] for a in axes]))
    mean = x.mean(axis=axes, keepdims=True, dtype=np.float32)
    std = x.std(axis=axes, keepdims=True, dtype=np.float32)
    return ((x - mean) / np.maximum(std, np.float32(1.0) / np.sqrt(n))).astype(np.float32)


def convert_image_dtype(image, dtype, saturate=False):
    """``tf.image.convert_image_dtype``: integers span [0, MAX], floats [0, 1]; scaling as TF does."""
    arr = np.asarray(image)
    dtype = np.dtype(dtype)
    if arr.dtype == dtype:
        return arr
    src_int, dst_int = arr.dtype.kind in "iu", dtype.kind in "iu"
    if src_int and dst_int:
        src_max, dst_max = np.iinfo(arr.dtype).max, np.iinfo(dtype).max
        if src_max > dst_max:
            return (arr.astype(np.int64) // ((src_max + 1) // (dst_max + 1))).astype(dtype)
        return (arr.astype(np.int64) * ((dst_max + 1) // (src_max + 1))).astype(dtype)
    if src_int:  # int -> float
        return (arr.astype(dtype) * dtype.type(1.0 / np.iinfo(arr.dtype).max)).astype(dtype)
    if dst_int:  # float -> int: scale by MAX + 0.5, then truncate
        scaled = arr.astype(np.float64 if arr.dtype == np.float64 else np.float32) * (np.iinfo(dtype).max + 0.5)
        if saturate:
            info = np.iinfo(dtype)
            scaled = np.clip(scaled, info.min, info.max)
        return scaled.astype(dtype)
    return arr.astype(dtype)


__all__ = ["central_crop", "convert_image_dtype", "crop_to_bounding_box", "flip_left_right", "flip_up_down",
           "per_image_standardization", "random_crop", "random_flip_left_right", "random_flip_up_down", "resize",
           "rng_of", "sample_distorted_bounding_box"]
