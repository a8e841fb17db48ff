"""``jaxfeed.ops``: the tf.image / tf.io image ops real pipelines call inside ``map``, on numpy and Pillow.

    from jaxfeed import ops
    def augment(record, rng):                       # map(augment, with_rng=True): stateless per element
        image = ops.decode_jpeg(record, channels=3)
        begin, size, _ = ops.sample_distorted_bounding_box(image.shape, [], rng,
                                                           use_image_if_no_bounding_boxes=True)
        image = image[begin[0]:begin[0] + size[0], begin[1]:begin[1] + size[1]]
        image = ops.resize(image, (224, 224), antialias=True)
        return ops.random_flip_left_right(image, rng)

Decoding lives in ``jaxfeed.formats.image``, the array ops in ``jaxfeed.pipeline.image_ops``; tolerances
against tf.image are in ``docs/porting.md``.
"""

from jaxfeed.formats.image import (decode_and_crop_jpeg, decode_image, decode_jpeg, decode_png, encode_jpeg,
                                   encode_png)
from jaxfeed.pipeline.image_ops import (central_crop, convert_image_dtype, crop_to_bounding_box, flip_left_right,
                                        flip_up_down, per_image_standardization, random_crop, random_flip_left_right,
                                        random_flip_up_down, resize, sample_distorted_bounding_box)

__all__ = ["central_crop", "convert_image_dtype", "crop_to_bounding_box", "decode_and_crop_jpeg", "decode_image",
           "decode_jpeg", "decode_png", "encode_jpeg", "encode_png", "flip_left_right", "flip_up_down",
           "per_image_standardization", "random_crop", "random_flip_left_right", "random_flip_up_down", "resize",
           "sample_distorted_bounding_box"]
