"""``list_files``: the files matching one or more glob patterns, on any fsspec filesystem."""

from __future__ import annotations

import numpy as np

from .. import structure
from ..errors import InvalidArgumentError
from ..filesystem import glob
from .base import Node


def _patterns(file_pattern) -> list[str]:
    if file_pattern is None:  # tf.data converts it to a string tensor: None is a ValueError there
        raise ValueError("list_files: `file_pattern` must be a string or a list of strings, got None.")
    if isinstance(file_pattern, (str, bytes)):
        items = [file_pattern]
    elif isinstance(file_pattern, (list, tuple)):
        items = list(file_pattern)
    elif isinstance(file_pattern, np.ndarray) and file_pattern.ndim <= 1:
        items = file_pattern.reshape(-1).tolist()
    else:
        raise TypeError(f"list_files: `file_pattern` must be a string or a list of strings, got "
                        f"{type(file_pattern).__name__}.")
    out = []
    for p in items:
        if isinstance(p, bytes):
            p = p.decode()
        if not isinstance(p, str):
            raise TypeError(f"list_files: patterns must be strings, got {p!r}.")
        out.append(p)
    return out


class ListFiles(Node):
    """tf.data's ``list_files`` [docs/tf-behaviour.md#list-files] before its shuffle (``Dataset.list_files`` adds that): all
    matches of all patterns, pooled and sorted, duplicates kept; scalar string elements. The patterns are
    globbed once, at construction; no match at all raises InvalidArgumentError there. Local matches are
    absolute paths; other filesystems' (``memory://``, ``gs://``, ...) keep their protocol so that readers
    can open them."""

    kind = "ListFiles"
    is_source = True

    def __init__(self, file_pattern):
        super().__init__()
        self.patterns = _patterns(file_pattern)
        matches = sorted(m for p in self.patterns for m in glob(p))
        if not matches:
            raise InvalidArgumentError(f"list_files: No files matched pattern: {', '.join(self.patterns)}",
                                       "ListFiles")
        self._files = matches
        self._data = np.empty(len(matches), dtype=object)
        self._data[:] = [m.encode() for m in matches]

    def files(self) -> list[str]:
        return list(self._files)

    def params(self):
        return {"file_pattern": self.patterns, "num_files": len(self._files)}

    def compute_spec(self):
        return structure.TensorSpec((), structure.STRING)

    def cardinality(self):
        return len(self._files)

    def random_access(self):
        return True

    def length(self):
        return len(self._files)

    def gather(self, indices):
        return self._data[np.asarray(indices, dtype=np.int64)]

    def element_at(self, index):
        return self._data[index]
