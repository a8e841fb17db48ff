"""``window``: datasets of consecutive (strided) elements (docs/tf-behaviour.md#window).

Window k starts at input index ``k * shift`` and holds the elements at ``start + j * stride`` for
``j < size`` that exist; without ``drop_remainder`` the last windows shrink. Each window is a finite
Dataset; for tuple or dict elements the window is a tuple or dict *of* datasets, one per component
(docs/tf-behaviour.md#structure), so the element spec is the input's spec with a ``DatasetSpec`` at every leaf.
"""

from __future__ import annotations

from .. import structure
from ..errors import InvalidArgumentError
from .base import INFINITE, Node, ShardWalk, UNKNOWN
from .common import check_bool, check_int


class Window(Node):
    kind = "Window"
    shard_walk = ShardWalk.THROUGH

    def __init__(self, input_node, size, shift=None, stride=1, drop_remainder=False):
        super().__init__((input_node,))
        self.size = _positive(size, "size")
        self.shift = self.size if shift is None else _positive(shift, "shift")
        self.stride = _positive(stride, "stride")
        self.drop_remainder = check_bool(drop_remainder, "drop_remainder", "window")

    @property
    def lazy_spec(self):
        return self.inputs[0].lazy_spec

    def params(self):
        return {"size": self.size, "shift": self.shift, "stride": self.stride,
                "drop_remainder": self.drop_remainder}

    def compute_spec(self):
        return structure.map_structure(structure.DatasetSpec, self.inputs[0].element_spec)

    def cardinality(self):
        n = self.inputs[0].cardinality()
        if n in (INFINITE, UNKNOWN):
            return n
        if not self.drop_remainder:
            return -(-n // self.shift)
        last_start = n - 1 - (self.size - 1) * self.stride  # the last index a full window may start at
        return 0 if last_start < 0 else last_start // self.shift + 1


def _positive(value, name) -> int:
    value = check_int(value, name, "window")
    if value <= 0:
        raise InvalidArgumentError(f"window: `{name}` must be greater than zero, got {value}.", "Window")
    return value
