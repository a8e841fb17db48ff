"""The user's ``Dataset`` class, for code that hands user functions a dataset or builds one with the Dataset
API but sits below ``pipeline/dataset.py``: the windows and groups of ``window``/``group_by_window``, the
inner datasets checked against a signature, the weighted choice, saved datasets and restored states.

``pipeline/dataset.py`` imports the nodes, so they must not import it; it hands its class over here when it
is defined (``set_dataset_class``), before any node can be built.
"""

from __future__ import annotations

from .base import Node

_dataset_class = None


def set_dataset_class(cls) -> None:
    global _dataset_class
    _dataset_class = cls


def dataset_class():
    """``pipeline.dataset.Dataset``."""
    return _dataset_class


def wrap(node):
    """``Dataset(node)``: a graph node as the user's Dataset."""
    return _dataset_class(node)


def dataset_of(value, transformation: str):
    """The node of the Dataset a ``flat_map``/``interleave`` function returned; TypeError for anything else."""
    node = getattr(value, "_node", None)
    if not isinstance(node, Node):
        raise TypeError(f"{transformation}: `map_func` must return a Dataset object, got "
                        f"{type(value).__name__}.")
    return node
