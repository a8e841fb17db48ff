"""Saving and restoring iterator state.

    from jaxfeed.pipeline import checkpoint
    checkpoint.save(it, "gs://bucket/run/step_1000.jxstate")   # any fsspec URL; atomic where possible
    it = checkpoint.restore(make_dataset(), "gs://bucket/run/step_1000.jxstate")

    mgr = checkpoint.CheckpointManager("/ckpt", max_to_keep=3)  # next to the model's step directories
    mgr.save(step, it)
    it = mgr.restore(mgr.latest_step(), make_dataset())

The iterators only give and take state dicts (``DatasetIterator.get_state``/``set_state``). This package
does the rest:

- ``format.py``: the versioned, pickle-free file format (``serialize``/``deserialize``); ``state_reader.py``
  validates every field of a file while reading it.
- ``files.py``: state files on any fsspec filesystem (``save``, ``load``, ``restore``) and
  ``CheckpointManager``.
- ``compatibility.py``: does a state belong to this pipeline (graph fingerprints, ``describe_difference``)
  and may it be saved (the external-state policy, judged by ``pipeline/reproducibility.py``).
- ``elastic.py``: states saved by W workers, merged and resumed by W' workers (public as
  ``jaxfeed.pipeline.elastic``).

Errors: a file that is not a state, or of an unknown format version -> ``InvalidArgumentError``; a
truncated, corrupted or malformed one -> ``DataLossError``; a state from another pipeline -> the iterator's
``FailedPreconditionError`` naming the first differing node. A missing file -> ``NotFoundError``.
"""

from .compatibility import check_external_state, describe_difference, graph_signature
from .files import CheckpointManager, load, read_bytes, restore, save, write_bytes
from .format import FORMAT_VERSION, MAGIC, deserialize, serialize
from ..reproducibility import external_state_nodes, external_state_reason

__all__ = ["serialize", "deserialize", "save", "load", "restore", "write_bytes", "read_bytes",
           "CheckpointManager", "check_external_state", "external_state_nodes", "external_state_reason",
           "graph_signature", "describe_difference", "MAGIC", "FORMAT_VERSION"]
