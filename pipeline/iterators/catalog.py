"""Every iterator module of pipeline/, imported so that each registers its iterators for its node classes
(``engine/registry.py``), and the builders of the nodes that have a choice of iterator.

``pipeline/dataset.py`` imports this module, so the registry is full before anything is iterated. A new
iterator module goes in the list below.
"""

from __future__ import annotations

from ..engine.registry import builds
from ..nodes.concatenate import Concatenate
from ..nodes.interleave import Interleave
from ..nodes.map import Map
from ..nodes.map_batch import MapAndBatch
from ..nodes.prefetch import Prefetch
from ..nodes.with_options import WithOptions
from ..nodes.zip import Zip
from . import (assert_cardinality, batch, cache, elastic_select, elements, filter, flat_map, generator,  # noqa: F401
               group_by_window, ignore_errors, map_batch, padded_batch, ragged_batch, random, rebatch, repeat,
               sample, saved_shard, scan, shard, shuffle, signature_check, snapshot, take, take_while, unbatch,
               unique, window)
from . import chosen_map
from .concatenate import ConcatenateIterator
from .interleave import InterleaveIterator
from .map import MapIterator
from .map_batch import MapBatchIterator
from .parallel_interleave import ParallelInterleaveIterator
from .parallel_map import ParallelMapIterator
from .prefetch import PrefetchIterator
from .process_map import ProcessMapIterator
from .random_access import RandomAccessIterator
from .zip import ZipIterator


@builds(Map)
def map_iterator(node, ctx):
    """On the consumer's thread without ``num_parallel_calls``; else on threads, or in worker processes when
    the map's ``executor`` (or else the options') says so."""
    if node.num_parallel_calls is None:
        return MapIterator(node, ctx)
    chosen = chosen_map.for_map(node, ctx)  # AUTOTUNE and no executor given: AUTOTUNE chooses it
    if chosen is not None:
        return chosen
    executor = node.executor or ctx.options.execution.executor or "thread"
    if executor == "process":
        return ProcessMapIterator(node, ctx)
    return ParallelMapIterator(node, ctx)


@builds(MapAndBatch)
def map_batch_iterator(node, ctx):
    """Fused, on threads; or, for a parallel map whose executor AUTOTUNE chooses, a probe first
    (``chosen_map.py``)."""
    return chosen_map.for_map_batch(node, ctx) or MapBatchIterator(node, ctx)


@builds(Interleave)
def interleave_iterator(node, ctx):
    if node.num_parallel_calls is None:
        return InterleaveIterator(node, ctx)
    return ParallelInterleaveIterator(node, ctx)


@builds(Concatenate)
def concatenate_iterator(node, ctx):
    """In index space when every input is random-access (a later ``batch`` gathers once)."""
    if node.random_access():
        return RandomAccessIterator(node, ctx)
    return ConcatenateIterator(node, ctx)


@builds(Zip)
def zip_iterator(node, ctx):
    """In index space when every input is random-access (a later ``batch`` gathers once)."""
    if node.random_access():
        return RandomAccessIterator(node, ctx)
    return ZipIterator(node, ctx)


@builds(Prefetch)
def prefetch_iterator(node, ctx):
    if node.buffer_size == 0:
        return ctx.build(node.inputs[0])  # prefetch(0) is a no-op
    return PrefetchIterator(node, ctx)


@builds(WithOptions)
def with_options_iterator(node, ctx):
    """Its input's iterator: the options pass has merged the options (and dropped the node) before a run;
    an inner dataset's ``with_options`` stays in the graph and does nothing."""
    return ctx.build(node.inputs[0])
