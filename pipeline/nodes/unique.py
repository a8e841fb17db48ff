"""``unique``: the first occurrence of each element (integer or string scalars)."""

from __future__ import annotations


from .. import structure
from .base import UNKNOWN
from .common import PassThrough


class Unique(PassThrough):
    """tf.data's ``unique``: elements are integer or string tensors (TypeError for other dtypes,
    InvalidArgumentError for a structure); tensors of any shape compare by shape and contents, as in tf.data.
    The saved state holds every distinct element seen so far, so it grows with the number of them."""

    kind = "Unique"

    def __init__(self, input_node):
        super().__init__((input_node,))
        spec = input_node.element_spec
        if not isinstance(spec, structure.TensorSpec):  # tf.data: InvalidArgumentError for a structure
            from ..errors import InvalidArgumentError

            raise InvalidArgumentError("unique: Unique transformation only supports datasets of single integer "
                                       f"or string elements, got the structure {spec!r}.", "Unique")
        if not (spec.dtype == structure.STRING or spec.dtype.kind in "iu"):
            raise TypeError("unique: Unique transformation only supports datasets of integer or string elements, "
                            f"got {spec!r}.")

    def cardinality(self):
        return UNKNOWN
