"""``ignore_errors``: skip the elements whose production raised, and go on."""

from __future__ import annotations

from .base import ShardWalk, UNKNOWN
from .common import PassThrough, first_element


class IgnoreErrors(PassThrough):
    """tf.data's ``ignore_errors``: any ``Exception`` raised while producing an element (a failing map, a
    ``DataLossError`` from a reader, ...) drops that element; ``log_warning`` logs each one.

    Beyond tf.data, each skip is recorded in the iterator's ``skipped`` list as ``{"node": <this node's
    label>, "error": "<Type>: <message>", "position": <input positions consumed before it>}``, plus
    ``filename``/``offset`` when the exception carries them. Set ``Options.experimental_ignore_errors_record
    = False`` to keep no record (it grows with every skip). The record is not part of the saved state.
    """

    kind = "IgnoreErrors"
    shard_walk = ShardWalk.THROUGH
    keeps_batch_dim = True

    def __init__(self, input_node, log_warning=False):
        super().__init__((input_node,))
        self.log_warning = bool(log_warning)

    def params(self):
        return {"log_warning": self.log_warning}

    def cardinality(self):
        return UNKNOWN

    def sample(self):
        """The first element that does not fail (the input's own sample might be one that does)."""
        return first_element(self)
