"""Image decoding and encoding as ``tf.io`` / ``tf.image`` do it, on Pillow (``jaxfeed.ops``).

Decoders take the encoded bytes (``bytes``, a 0-d object array, or any bytes-like) and return ``uint8``
(or ``uint16`` for 16-bit PNGs asked as such) arrays of shape ``(height, width, channels)``. Pillow's
libjpeg uses the accurate integer DCT where TensorFlow's default is the fast one, so JPEG pixels may
differ from ``tf.io.decode_jpeg`` by a few levels (the measured bound is in ``docs/porting.md`` and held by
``tests/ops``); PNG decoding is exact. Bad data raises ``InvalidArgumentError`` naming the op.
"""

from __future__ import annotations

import io

import numpy as np

from jaxfeed.pipeline.errors import InvalidArgumentError

_CHANNELS = {0: None, 1: "L", 3: "RGB", 4: "RGBA"}


def _bytes(contents, what) -> bytes:
    if isinstance(contents, np.ndarray) and contents.ndim == 0:
        contents = contents.item()
    if isinstance(contents, (bytes, bytearray, memoryview)):
        return bytes(contents)
    if isinstance(contents, np.bytes_):
        return bytes(contents)
    raise InvalidArgumentError(f"{what}: expected encoded image bytes, got {type(contents).__name__}.", what)


def _open(contents, what, formats=None):
    from PIL import Image, UnidentifiedImageError

    data = _bytes(contents, what)
    try:
        img = Image.open(io.BytesIO(data), formats=formats)
        img.load()
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise InvalidArgumentError(f"{what}: invalid image data ({len(data)} bytes): {e}", what) from None
    return img


def _to_array(img, channels, what):
    if channels not in _CHANNELS:
        raise InvalidArgumentError(f"{what}: channels must be 0, 1, 3 or 4, got {channels!r}.", what)
    mode = _CHANNELS[channels]
    if mode is None:  # keep what the file has: gray, gray+alpha, RGB or RGBA
        if img.mode == "P":
            mode = "RGBA" if "transparency" in img.info else "RGB"
        elif img.mode in ("1", "L", "LA", "RGB", "RGBA"):
            mode = "L" if img.mode == "1" else img.mode
        elif img.mode == "CMYK":
            mode = "RGB"
        elif img.mode.startswith("I"):
            mode = img.mode
        else:
            mode = "RGB"
    if mode == "L" and img.mode in ("RGB", "RGBA") and img.format == "PNG":
        return _libpng_gray(np.asarray(img.convert("RGB")))
    if img.mode != mode:
        img = img.convert(mode)
    arr = np.asarray(img)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    return arr


# libpng's rgb_to_gray as TensorFlow sets it (0.299, 0.587 in 1/100000 steps, as 15-bit integers), floored
_PNG_GRAY = np.array([29900 * 32768 // 100000, 58700 * 32768 // 100000, 0], np.uint32)
_PNG_GRAY[2] = 32768 - _PNG_GRAY[0] - _PNG_GRAY[1]


def _libpng_gray(rgb):
    return ((rgb.astype(np.uint32) @ _PNG_GRAY) >> 15).astype(rgb.dtype)[:, :, None]


def _check_jpeg_options(what, fancy_upscaling, try_recover_truncated, acceptable_fraction, dct_method):
    """Refuse what Pillow cannot do rather than ignore it: it always upsamples chroma smoothly (TF's
    ``fancy_upscaling=True``) and refuses truncated data. ``dct_method`` is a hint TF itself may ignore."""
    if not fancy_upscaling:
        raise ValueError(f"{what}: fancy_upscaling=False is not supported (chroma is always upsampled smoothly).")
    if try_recover_truncated or acceptable_fraction != 1:
        raise ValueError(f"{what}: try_recover_truncated / acceptable_fraction are not supported (truncated "
                         "JPEG data raises InvalidArgumentError).")
    if dct_method not in ("", "INTEGER_FAST", "INTEGER_ACCURATE"):
        raise InvalidArgumentError(f"{what}: dct_method must be '', 'INTEGER_FAST' or 'INTEGER_ACCURATE', got "
                                   f"{dct_method!r}.", what)


def decode_jpeg(contents, channels=0, ratio=1, fancy_upscaling=True, try_recover_truncated=False,
                acceptable_fraction=1, dct_method="", name=None):
    """``tf.io.decode_jpeg``: ``ratio`` 1, 2, 4 or 8 downscales while decoding, as libjpeg does.
    ``fancy_upscaling=False`` and ``try_recover_truncated=True`` raise ValueError (not supported);
    ``dct_method`` is a hint, as in TF (Pillow's libjpeg default DCT is used whatever its value)."""
    what = "decode_jpeg"
    _check_jpeg_options(what, fancy_upscaling, try_recover_truncated, acceptable_fraction, dct_method)
    if ratio not in (1, 2, 4, 8):
        raise InvalidArgumentError(f"{what}: ratio must be 1, 2, 4 or 8, got {ratio!r}.", what)
    from PIL import Image, UnidentifiedImageError

    data = _bytes(contents, what)
    try:
        img = Image.open(io.BytesIO(data), formats=["JPEG"])
        if ratio != 1 or channels == 1:  # libjpeg scales, and gives its luma plane for one channel, as in TF
            img.draft("L" if channels == 1 else img.mode, (-(-img.width // ratio), -(-img.height // ratio)))
        img.load()
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise InvalidArgumentError(f"{what}: invalid JPEG data ({len(data)} bytes): {e}", what) from None
    return _to_array(img, channels, what)


def decode_and_crop_jpeg(contents, crop_window, channels=0, ratio=1, fancy_upscaling=True,
                         try_recover_truncated=False, acceptable_fraction=1, dct_method="", name=None):
    """``tf.image.decode_and_crop_jpeg``: ``crop_window`` is ``[y, x, height, width]``; the options as in
    ``decode_jpeg``."""
    what = "decode_and_crop_jpeg"
    _check_jpeg_options(what, fancy_upscaling, try_recover_truncated, acceptable_fraction, dct_method)
    image = decode_jpeg(contents, channels, ratio)
    y, x, h, w = (int(v) for v in np.asarray(crop_window).reshape(-1))
    if y < 0 or x < 0 or h <= 0 or w <= 0 or y + h > image.shape[0] or x + w > image.shape[1]:
        raise InvalidArgumentError(f"{what}: Invalid JPEG data or crop window, data size {len(_bytes(contents, what))}"
                                   f", crop window [{y}, {x}, {h}, {w}] for an image of {image.shape[:2]}.", what)
    return image[y:y + h, x:x + w]


def decode_png(contents, channels=0, dtype=np.uint8, name=None):
    """``tf.io.decode_png``: ``dtype`` uint8 or uint16 (8-bit files scaled by 257 to uint16, as TF does)."""
    what = "decode_png"
    dtype = np.dtype(dtype)
    if dtype not in (np.dtype(np.uint8), np.dtype(np.uint16)):
        raise InvalidArgumentError(f"{what}: dtype must be uint8 or uint16, got {dtype}.", what)
    img = _open(contents, what, formats=["PNG"])
    sixteen = img.mode.startswith("I")
    arr = _to_array(img, channels, what)
    if sixteen:
        arr = arr.astype(np.uint16)
        return arr if dtype == np.uint16 else (arr >> 8).astype(np.uint8)
    return arr.astype(np.uint16) * 257 if dtype == np.uint16 else arr


def decode_image(contents, channels=None, dtype=np.uint8, name=None, expand_animations=True):
    """``tf.io.decode_image`` for JPEG, PNG, BMP and GIF (GIF: ``(frames, h, w, 3)`` unless
    ``expand_animations=False``, which keeps the first frame). A float ``dtype`` scales to [0, 1]."""
    what = "decode_image"
    img = _open(contents, what, formats=["JPEG", "PNG", "BMP", "GIF"])
    channels = 0 if channels is None else channels
    if img.format == "GIF":
        frames = []
        for i in range(getattr(img, "n_frames", 1) if expand_animations else 1):
            img.seek(i)
            frames.append(_to_array(img.convert("RGB"), 3 if channels == 0 else channels, what))
        arr = np.stack(frames) if expand_animations else frames[0]
    elif img.format == "PNG":
        arr = decode_png(contents, channels, np.uint16 if np.dtype(dtype) == np.uint16 else np.uint8)
    else:
        arr = _to_array(img, channels, what)
    from jaxfeed.pipeline.image_ops import convert_image_dtype

    return convert_image_dtype(arr, dtype)


def encode_png(image, compression=-1, name=None) -> bytes:
    """``tf.io.encode_png`` for uint8 and uint16 images with 1, 3 or 4 channels."""
    from PIL import Image

    arr = np.asarray(image)
    if arr.ndim != 3 or arr.shape[2] not in (1, 3, 4) or arr.dtype not in (np.uint8, np.uint16):
        raise InvalidArgumentError(f"encode_png: need a uint8/uint16 (h, w, 1|3|4) image, got {arr.dtype} "
                                   f"{arr.shape}.", "encode_png")
    if arr.dtype == np.uint16:
        if arr.shape[2] != 1:
            raise InvalidArgumentError("encode_png: uint16 images must have 1 channel here.", "encode_png")
        img = Image.fromarray(np.ascontiguousarray(arr[:, :, 0]))  # a 2-D uint16 array is mode "I;16"
    else:
        img = Image.fromarray(arr[:, :, 0] if arr.shape[2] == 1 else arr)
    out = io.BytesIO()
    img.save(out, format="PNG", compress_level=6 if compression == -1 else int(compression))
    return out.getvalue()


def encode_jpeg(image, quality=95, name=None) -> bytes:
    """``tf.io.encode_jpeg`` for uint8 images with 1 or 3 channels."""
    from PIL import Image

    arr = np.asarray(image)
    if arr.ndim != 3 or arr.shape[2] not in (1, 3) or arr.dtype != np.uint8:
        raise InvalidArgumentError(f"encode_jpeg: need a uint8 (h, w, 1|3) image, got {arr.dtype} {arr.shape}.",
                                   "encode_jpeg")
    out = io.BytesIO()
    Image.fromarray(arr[:, :, 0] if arr.shape[2] == 1 else arr).save(out, format="JPEG", quality=int(quality))
    return out.getvalue()


__all__ = ["decode_and_crop_jpeg", "decode_image", "decode_jpeg", "decode_png", "encode_jpeg", "encode_png"]
