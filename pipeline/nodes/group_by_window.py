"""``group_by_window`` and ``bucket_by_sequence_length``.

``group_by_window``: ``key_func`` maps each element to an integer key; elements gather per key until the
key's window holds ``window_size`` (or ``window_size_func(key)``) elements; that window, as a Dataset, goes
to ``reduce_func(key, window)``, whose returned Dataset's elements are emitted. When the input ends the
partial windows are flushed in ascending key order -- tf.data's order (its groups live in a sorted map;
its own tests assert "the small outputs at the end are deterministically produced in key order").

Deviation: tf.data requires ``key_func`` to return an int64 scalar; any integer scalar (a Python ``int``
included) is accepted here. Functions run per element, so a bad key is reported at that element.

``bucket_by_sequence_length`` is built as tf.data builds it: group_by_window keyed on the bucket of
``element_length_func(element)`` (bucket i holds lengths in ``[boundaries[i-1], boundaries[i])``), each
window padded and batched with ``padded_batch`` (or ``batch`` with ``no_padding``).
"""

from __future__ import annotations

import bisect

import numpy as np

from .. import structure
from ..errors import InvalidArgumentError
from .base import UNKNOWN, Node
from .common import UNKNOWN_SPEC, call, call_for_spec, check_int, check_signature

TRANSFORMATION = "group_by_window"


class GroupByWindow(Node):
    kind = "GroupByWindow"
    lazy_spec = True  # the spec is that of reduce_func's dataset

    def __init__(self, input_node, key_func, reduce_func, window_size=None, window_size_func=None):
        super().__init__((input_node,))
        if (window_size is None) == (window_size_func is None):
            raise ValueError("group_by_window: Either the `window_size` argument or the `window_size_func` argument "
                             "must be specified (and not both).")
        if window_size is not None:
            window_size = check_int(window_size, "window_size", TRANSFORMATION)
            if window_size <= 0:
                raise InvalidArgumentError(f"group_by_window: Window size must be greater than zero, but got "
                                           f"{window_size}.", self.kind)
        elif not callable(window_size_func):
            raise TypeError(f"group_by_window: `window_size_func` must be callable, got {window_size_func!r}")
        check_signature(key_func, input_node, TRANSFORMATION)
        if not callable(reduce_func):
            raise TypeError(f"group_by_window: `reduce_func` must be callable, got {reduce_func!r}")
        self.key_func, self.reduce_func = key_func, reduce_func
        self.window_size, self.window_size_func = window_size, window_size_func

    def params(self):
        p = {"key_func": self.key_func, "reduce_func": self.reduce_func}
        if self.window_size is not None:
            p["window_size"] = self.window_size
        else:
            p["window_size_func"] = self.window_size_func
        return p

    def functions(self):
        fns = {"key_func": self.key_func, "reduce_func": self.reduce_func}
        if self.window_size_func is not None:
            fns["window_size_func"] = self.window_size_func
        return fns

    def compute_spec(self):
        """The spec of what ``reduce_func`` returns for a one-element window of a sample element: its
        structure, dtypes and ranks, every dimension unknown (other windows, sizes and keys differ)."""
        from .elements import dataset_of_elements
        from .signature import relax

        def reduced_spec(element):
            key = self.key_of(element, 0)
            return relax(self.reduce(key, dataset_of_elements([element]), 0).element_spec)

        spec = call_for_spec(reduced_spec, self.inputs[0])
        return UNKNOWN_SPEC if spec is None else spec

    def cardinality(self):
        return UNKNOWN

    # ------------------------------------------------------------------ the user functions, checked
    def key_of(self, element, position: int) -> int:
        key = call(self.key_func, element)
        if type(key) is np.int64 or type(key) is int:
            return int(key)
        if isinstance(key, (bool, np.bool_)) or np.ndim(key) != 0 or np.asarray(key).dtype.kind not in "iu":
            raise InvalidArgumentError(
                f"{self.label()}: `key_func` must return a single integer (int64) scalar; got {key!r:.60} for "
                f"input element {position}.", self.kind)
        return int(key)

    def size_of(self, key: int) -> int:
        if self.window_size is not None:
            return self.window_size
        size = self.window_size_func(np.int64(key))
        if isinstance(size, (bool, np.bool_)) or np.ndim(size) != 0 or np.asarray(size).dtype.kind not in "iu":
            raise InvalidArgumentError(f"{self.label()}: `window_size_func` must return an integer scalar; got "
                                       f"{size!r:.60} for key {key}.", self.kind)
        if size <= 0:
            raise InvalidArgumentError(f"{self.label()}: Window size must be greater than zero, but got {size} "
                                       f"(key {key}).", self.kind)
        return int(size)

    def reduce(self, key: int, window, position: int):
        result = self.reduce_func(np.int64(key), window)
        if not hasattr(result, "_node"):
            raise TypeError(f"{self.label()}: `reduce_func` must return a Dataset, got {type(result).__name__} "
                            f"(window {position}, key {key}).")
        return result


def bucket_by_sequence_length(dataset, element_length_func, bucket_boundaries, bucket_batch_sizes,
                              padded_shapes=None, padding_values=None, pad_to_bucket_boundary=False,
                              no_padding=False, drop_remainder=False):
    """tf.data's ``bucket_by_sequence_length`` (see the module docstring)."""
    boundaries = [check_int(b, "bucket_boundaries", "bucket_by_sequence_length") for b in bucket_boundaries]
    sizes = [check_int(s, "bucket_batch_sizes", "bucket_by_sequence_length") for s in bucket_batch_sizes]
    if len(sizes) != len(boundaries) + 1:
        raise ValueError(f"bucket_by_sequence_length: `len(bucket_batch_sizes)` must equal "
                         f"`len(bucket_boundaries) + 1` but `len(bucket_batch_sizes)={len(sizes)}` and "
                         f"`len(bucket_boundaries)={len(boundaries)}`.")
    if any(b >= c for b, c in zip(boundaries, boundaries[1:])):
        raise ValueError(f"bucket_by_sequence_length: `bucket_boundaries` must be increasing, got {boundaries}")
    if any(s <= 0 for s in sizes):
        raise InvalidArgumentError(f"bucket_by_sequence_length: batch sizes must be greater than zero, got {sizes}.",
                                   "bucket_by_sequence_length")
    if not callable(element_length_func):
        raise TypeError("bucket_by_sequence_length: `element_length_func` must be callable")
    def bucket_of(*element):
        return bisect.bisect_right(boundaries, int(element_length_func(*element)))

    def batch_size_of(bucket):
        return sizes[int(bucket)]

    def batch_window(bucket, window):
        size = sizes[int(bucket)]
        if no_padding:
            return window.batch(size, drop_remainder=drop_remainder)
        shapes = padded_shapes
        if pad_to_bucket_boundary:
            if int(bucket) == len(sizes) - 1:
                raise InvalidArgumentError("bucket_by_sequence_length: When pad_to_bucket_boundary=True, elements "
                                           f"must have length < bucket_boundaries[-1] ({boundaries[-1]}).",
                                           "bucket_by_sequence_length")
            shapes = _fill_unknown_dims(dataset.element_spec, padded_shapes, boundaries[int(bucket)] - 1, window)
        return window.padded_batch(size, shapes, padding_values, drop_remainder=drop_remainder)

    return dataset.group_by_window(bucket_of, batch_window, window_size_func=batch_size_of)


def _fill_unknown_dims(spec, padded_shapes, filler, window):
    """``padded_shapes`` with unknown dims set to ``filler``; by default the element spec's shapes.

    A spec dim is kept only when every element of this window has it: for an honest spec (a function's
    output has unknown dims unless declared, and declarations are checked) that is always the case, and
    it is exactly tf.data's rule; the check is a second guard against padding to a wrong size."""
    from .padded_batch import as_dims, up_to

    if padded_shapes is not None:
        shapes = [as_dims(s, p) for s, (p, _) in zip(up_to(spec, padded_shapes, "padded_shapes"),
                                                      structure.iter_structure_paths(spec))]
        return structure.pack_as(spec, [[filler if d is None else d for d in s] for s in shapes])
    seen = _window_shapes(window)
    shapes = []
    for i, (path, leaf) in enumerate(structure.iter_structure_paths(spec)):
        if leaf.shape is None:
            raise ValueError(f"bucket_by_sequence_length: component {path} has an unknown rank; give "
                             "`padded_shapes`.")
        shapes.append([d if d is not None and all(len(s[i]) == len(leaf.shape) and s[i][k] == d for s in seen)
                       else filler for k, d in enumerate(leaf.shape)])
    return structure.pack_as(spec, shapes)


def _window_shapes(window) -> list:
    """Per element of a window dataset (made by ``dataset_of_elements``), its component shapes."""
    from .elements import Elements

    node = window._node
    if isinstance(node, Elements):
        return [[np.shape(x) for x in structure.flatten(e)] for e in node.elements]
    return [[np.shape(leaf)[1:] for leaf in structure.flatten(node.data)]]  # stacked: one shape for all
