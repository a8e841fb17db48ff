"""Splits for ``distributed_epoch``: how a dataset's source is cut, and the dataset restricted to one split.

A dataset can be split when it has exactly one source and that source is either random-access with a known
length (range, tensor slices, Parquet/ArrayRecord files: a split is ``split_size`` consecutive indices) or
a file reader with a static file list (a split is one file). The worker builds the dataset with the source
restricted to the split -- the transformations above it run unchanged -- so a split's elements are what
the whole dataset would make of that part of the source. Batches, windows, shuffles and other
transformations that combine elements do so within a split (documented in README "Scale out").
"""

from __future__ import annotations

import numpy as np

from jaxfeed.pipeline import graph
from jaxfeed.pipeline.dataset import Dataset
from jaxfeed.pipeline.errors import InvalidArgumentError

DEFAULT_SPLIT_SIZE = 1024


def _sources(root):
    return [n for n in graph.walk(root) if not n.inputs]


def plan(dataset: Dataset, split_size: int = DEFAULT_SPLIT_SIZE) -> dict:
    """``{"kind": "range" | "file", "count": number of splits, ...}`` for ``dataset``'s source."""
    root = dataset._node
    readers = [n for n in graph.walk(root) if n.reads_files and n.inputs]
    if len(readers) == 1 and readers[0].files() is not None and len(_sources(root)) == 1:
        files = readers[0].files()
        if not readers[0].random_access():
            return {"kind": "file", "count": len(files)}
    sources = _sources(root)
    if len(sources) != 1:
        raise InvalidArgumentError(f"distributed_epoch needs a dataset with one source to split; this one has "
                                   f"{len(sources)}: {[s.label() for s in sources]}.", "service")
    source = sources[0]
    if readers and readers[0].random_access():
        source = readers[0]
    if not source.random_access():
        raise InvalidArgumentError(f"distributed_epoch cannot split the source {source.label()}: it has no "
                                   "random access and is not a file reader with a static file list.", "service")
    length = source.length()
    return {"kind": "range", "count": max(1, -(-length // split_size)), "length": length, "split_size": split_size}


def restrict(dataset: Dataset, split_plan: dict, split: int) -> Dataset:
    """``dataset`` with its source cut down to split ``split`` of ``split_plan``."""
    from jaxfeed.pipeline.nodes.take import Skip, Take
    from jaxfeed.pipeline.nodes.tensor_slices import TensorSlices

    root = dataset._node
    if split_plan["kind"] == "file":
        reader = next(n for n in graph.walk(root) if n.reads_files and n.inputs)
        name = reader.files()[split]
        only = TensorSlices(np.array([name.encode("utf-8"), b""], dtype=object)[:1])
        return Dataset(graph.transform(root, lambda n: n.with_inputs([only]) if n is reader else n))
    readers = [n for n in graph.walk(root) if n.reads_files and n.inputs]
    source = readers[0] if readers and readers[0].random_access() else _sources(root)[0]
    size = split_plan["split_size"]
    start = split * size
    count = min(size, split_plan["length"] - start)

    def cut(node):
        if node is source:
            return Take(Skip(node, start), count)
        return node

    # the source itself is kept (identity), its consumers read the cut instead
    cut_source = cut(source)
    return Dataset(graph.transform(root, lambda n: n.with_inputs([cut_source if i is source else i
                                                                  for i in n.inputs])
                                   if any(i is source for i in n.inputs) else
                                   (cut_source if n is source and n is root else n)))
