"""decode_jpeg's tf.io options that Pillow cannot honour are refused, not ignored."""

import numpy as np
import pytest

from jaxfeed.formats import image
from jaxfeed.pipeline.errors import InvalidArgumentError


@pytest.fixture(scope="module")
def jpeg():
    pytest.importorskip("PIL")
    return image.encode_jpeg(np.full((8, 8, 3), 128, np.uint8))


@pytest.mark.parametrize("decode", [
    lambda data, **kw: image.decode_jpeg(data, **kw),
    lambda data, **kw: image.decode_and_crop_jpeg(data, [0, 0, 4, 4], **kw),
], ids=["decode_jpeg", "decode_and_crop_jpeg"])
@pytest.mark.parametrize("options", [
    {"fancy_upscaling": False}, {"try_recover_truncated": True}, {"acceptable_fraction": 0.5},
], ids=["fancy_upscaling", "try_recover_truncated", "acceptable_fraction"])
def test_an_option_pillow_cannot_honour_is_refused(jpeg, decode, options):
    with pytest.raises(ValueError, match=next(iter(options))):
        decode(jpeg, **options)


@pytest.mark.parametrize("dct_method", ["", "INTEGER_FAST", "INTEGER_ACCURATE"])
def test_dct_method_is_a_hint_as_in_tf(jpeg, dct_method):
    assert image.decode_jpeg(jpeg, dct_method=dct_method).shape == (8, 8, 3)


def test_an_unknown_dct_method_is_refused(jpeg):
    with pytest.raises(InvalidArgumentError, match="dct_method"):
        image.decode_jpeg(jpeg, dct_method="FLOAT")
