"""``Dataset.zip``: elements of several datasets side by side, in the structure the datasets were given."""

from __future__ import annotations

import numpy as np

from .. import structure
from .base import INFINITE, Node, ShardWalk, UNKNOWN


def _check_nest(datasets):
    """TypeError unless ``datasets`` is a (nested) structure of Datasets: tuples, dicts -- not lists."""
    for path, leaf in structure.iter_structure_paths(datasets, "datasets"):
        if isinstance(leaf, list):
            raise TypeError(f"zip: Invalid `datasets` ({path} is a list). Python `list` is not supported and you "
                            "should use `tuple` instead.")
        if not isinstance(getattr(leaf, "_node", None), Node):
            raise TypeError(f"zip: Invalid `datasets`: {path} is a {type(leaf).__name__}, not a Dataset. "
                            "`datasets` must be a (nested) structure of Datasets.")


class Zip(Node):
    """tf.data's ``zip`` [docs/tf-behaviour.md#zip]: the element has the structure of the datasets argument (a single
    dataset is not wrapped; ``(a,)`` gives 1-tuples); it stops at the shortest input. When every input is
    random-access, so is the zip: ``enumerate`` and zipped in-memory arrays gather whole batches."""

    kind = "Zip"
    shard_walk = ShardWalk.EVERY_INPUT

    def __init__(self, datasets):
        _check_nest(datasets)
        leaves = structure.flatten(datasets)
        if not leaves:
            raise ValueError("zip: `datasets` must contain at least one Dataset.")
        super().__init__([d._node for d in leaves])
        self.template = structure.map_structure(lambda _: None, datasets)  # the nest, leaves blanked

    def pack(self, leaves):
        return structure.pack_as(self.template, leaves)

    def compute_spec(self):
        return self.pack([i.element_spec for i in self.inputs])

    @property
    def lazy_spec(self):
        return any(i.lazy_spec for i in self.inputs)

    def sample(self):
        from .common import sample_element

        return self.pack([sample_element(i) for i in self.inputs])

    def params(self):
        return {"structure": structure.describe(self.template)}

    def cardinality(self):
        result = INFINITE
        for node in self.inputs:
            n = node.cardinality()
            if n == UNKNOWN:
                return UNKNOWN
            if n != INFINITE and (result == INFINITE or n < result):
                result = n
        return result

    # ------------------------------------------------------------------ random access
    def random_access(self):
        return all(i.random_access() for i in self.inputs)

    def length(self):
        return min(i.length() for i in self.inputs)

    def gather(self, indices: np.ndarray):
        return self.pack([i.gather(indices) for i in self.inputs])

    def element_at(self, index):
        return self.pack([i.element_at(index) for i in self.inputs])
