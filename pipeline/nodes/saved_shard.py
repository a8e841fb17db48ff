"""One shard of a ``Dataset.save`` directory (``saved_dataset.py``): a source of ``num_elements`` elements
read from a cache-format file pair, with the spec the save recorded."""

from __future__ import annotations

from .base import Node


class SavedShard(Node):
    kind = "SavedShard"
    is_source = True
    reads_files = True

    def __init__(self, prefix: str, spec, num_elements: int):
        super().__init__(())
        self.prefix = prefix
        self.spec = spec
        self.num_elements = int(num_elements)

    def params(self):
        return {"prefix": self.prefix, "num_elements": self.num_elements}

    def compute_spec(self):
        return self.spec

    def cardinality(self):
        return self.num_elements
