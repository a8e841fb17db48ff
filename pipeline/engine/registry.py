"""Which iterator runs which node: a table from node class to builder, filled by the iterator modules.

Iterators depend on nodes, never the reverse: a node module does not name its iterator. Each iterator
module registers itself for its node classes (``@builds(Shuffle)`` on ``ShuffleIterator``); a node whose
iterator depends on its arguments or the options registers a builder function that chooses (``map``:
sequential, threads or processes). ``build`` looks the node's class up, then its base classes, so a
subclass runs on its base's iterator unless it registers its own.

The table is filled when the iterator modules are imported: ``pipeline/iterators/catalog.py`` imports
pipeline's (``pipeline/dataset.py`` imports the catalog); a format reader registers its iterator in its own
module, which defines the node too.
"""

from __future__ import annotations

from typing import Callable

_builders: dict[type, Callable] = {}


def builds(*node_classes: type):
    """Register the decorated iterator class or function ``(node, ctx) -> iterator`` for ``node_classes``."""

    def register(builder):
        for cls in node_classes:
            known = _builders.get(cls)
            if known is not None and _name(known) != _name(builder):  # the same one again is a module reload
                raise ValueError(f"{cls.__name__} already has an iterator builder: {_name(known)}")
            _builders[cls] = builder
        return builder

    return register


def build(node, ctx):
    """A fresh iterator over ``node`` in ``ctx``, made by the builder registered for its class."""
    for cls in type(node).__mro__:
        builder = _builders.get(cls)
        if builder is not None:
            return builder(node, ctx)
    raise NotImplementedError(f"{node.kind} cannot be iterated: no iterator is registered for "
                              f"{type(node).__name__} (engine/registry.py)")


def _name(builder) -> str:
    return f"{builder.__module__}.{builder.__qualname__}"
