"""``padded_batch``: batch elements of different shapes by padding each component to a common shape.

``padded_shapes`` and ``padding_values`` follow the element's nest; at each component they hold a shape
(ints for fixed sizes, ``None``/-1 for "the largest in this batch") and a scalar. Without ``padded_shapes``
every dimension is padded to the largest in its batch.

Deviation from tf.data (docs/tf-behaviour.md#padded-batch): a Python ``int`` padding value is accepted for any integer or
float component it fits (TF turns it into int32 first and then rejects ``-1`` for an int64 component). numpy
padding values must still have exactly the component's dtype.

Checks that need the input's element spec run at construction when that spec is known without running user
code; after a ``map`` (``lazy_spec``) they run on the first batch instead, against its first element.
"""

from __future__ import annotations

import numbers

import numpy as np

from .. import structure
from .base import Node, ShardWalk
from .batch import batched_cardinality, check_batch_size, refuse_unbatchable
from .common import check_bool

TRANSFORMATION = "padded_batch"


class LeafPlan:
    """How one component is padded: ``dims`` (None: every dim to the batch maximum; else per dim an int or
    None) and the padding ``value`` (None: the dtype's zero, decided when the dtype is seen)."""

    __slots__ = ("path", "dims", "value")

    def __init__(self, path, dims, value):
        self.path, self.dims, self.value = path, dims, value


class PaddedBatch(Node):
    kind = "PaddedBatch"
    shard_walk = ShardWalk.THROUGH

    def __init__(self, input_node, batch_size, padded_shapes=None, padding_values=None, drop_remainder=False):
        super().__init__((input_node,))
        self.batch_size = check_batch_size(batch_size, TRANSFORMATION)
        self.drop_remainder = check_bool(drop_remainder, "drop_remainder", "padded_batch")
        self.padded_shapes = padded_shapes
        self.padding_values = padding_values
        if not self.lazy_spec:
            self.plan(input_node.element_spec)  # raises the construction-time errors

    @property
    def lazy_spec(self):
        return self.inputs[0].lazy_spec

    def params(self):
        return {"batch_size": self.batch_size, "padded_shapes": self.padded_shapes,
                "padding_values": self.padding_values, "drop_remainder": self.drop_remainder}

    def plan(self, spec) -> list[LeafPlan]:
        """One ``LeafPlan`` per component of ``spec`` (an element spec, flattened order); validates."""
        refuse_unbatchable(spec, "padded_batch")
        paths = [p for p, _ in structure.iter_structure_paths(spec)]
        leaf_specs = structure.flatten(spec)
        shapes = (up_to(spec, self.padded_shapes, "padded_shapes") if self.padded_shapes is not None
                  else [None] * len(leaf_specs))
        values = (up_to(spec, self.padding_values, "padding_values") if self.padding_values is not None
                  else [None] * len(leaf_specs))
        plans = []
        for path, leaf, shape, value in zip(paths, leaf_specs, shapes, values):
            dims = as_dims(shape, path) if shape is not None else None
            if dims is None and self.padded_shapes is None and leaf.shape is None:
                raise ValueError(f"padded_batch: component {path} has an unknown rank; give its shape in "
                                 "`padded_shapes`.")
            if dims is not None and leaf.shape is not None:
                _check_compatible(dims, leaf.shape, path)
            plans.append(LeafPlan(path, dims, None if value is None else padding_scalar(value, leaf.dtype, path)))
        return plans

    def compute_spec(self):
        spec = self.inputs[0].element_spec
        plans = self.plan(spec)
        batch_dim = self.batch_size if self.drop_remainder else None
        out = []
        for leaf, p in zip(structure.flatten(spec), plans):
            shape = leaf.shape if p.dims is None else p.dims
            out.append(structure.TensorSpec(None if shape is None else (batch_dim,) + tuple(shape), leaf.dtype))
        return structure.pack_as(spec, out)

    def cardinality(self):
        return batched_cardinality(self.inputs[0].cardinality(), self.batch_size, self.drop_remainder)

    def batches_of(self):
        return int(self.batch_size)


def up_to(template, value, what):
    """``value``'s entries at the component positions of ``template`` (a spec or an element), in
    ``structure.flatten`` order: dicts match by key, as the components do."""
    try:
        return structure.flatten_up_to(template, value, what)
    except TypeError as e:
        raise TypeError(f"padded_batch: {e}") from None


def as_dims(shape, path) -> tuple:
    if isinstance(shape, np.ndarray):
        shape = shape.tolist()
    if isinstance(shape, (numbers.Integral, np.integer)) and not isinstance(shape, (bool, np.bool_)):
        shape = [shape]  # tf.TensorShape(5) is the 1-D shape [5]: tf.data accepts a scalar padded shape
    if not isinstance(shape, (list, tuple)):
        raise TypeError(f"padded_batch: padded shape of component {path} must be a list of dimensions, "
                        f"got {shape!r}")
    dims = []
    for d in shape:
        if d is None:
            dims.append(None)
            continue
        if isinstance(d, bool) or not isinstance(d, (numbers.Integral, np.integer)):
            raise TypeError(f"padded_batch: dimension {d!r} of component {path}'s padded shape is not an integer")
        if d < -1:
            raise ValueError(f"padded_batch: dimension {d} of component {path}'s padded shape must be >= -1")
        dims.append(None if d == -1 else int(d))
    return tuple(dims)


def _check_compatible(dims, shape, path):
    if len(dims) != len(shape) or any(p is not None and s is not None and p < s for p, s in zip(dims, shape)):
        raise ValueError(f"padded_batch: The padded shape {list(dims)} is not compatible with the shape "
                         f"{list(shape)} of component {path}.")


def default_padding(dtype):
    dtype = np.dtype(dtype)
    if dtype == structure.STRING:
        return b""
    return dtype.type(0)


def padding_scalar(value, dtype, path):
    """``value`` as a padding scalar of ``dtype``: TypeError for the wrong type, ValueError if not scalar."""
    dtype = np.dtype(dtype)
    if isinstance(value, (list, tuple)) or (isinstance(value, (np.ndarray, np.generic)) and np.ndim(value) != 0):
        raise ValueError(f"padded_batch: padding value of component {path} must be a scalar, got shape "
                         f"{np.shape(value)}")
    if isinstance(value, (str, bytes, np.str_, np.bytes_)) or (
            isinstance(value, np.ndarray) and value.dtype.kind in "SUO"):
        if dtype != structure.STRING:
            raise TypeError(f"padded_batch: padding value {value!r} of component {path} is a string; the "
                            f"component is {structure.dtype_name(dtype)}")
        value = value.item() if isinstance(value, np.ndarray) else value
        return value.encode() if isinstance(value, str) else bytes(value)
    if dtype == structure.STRING:
        raise TypeError(f"padded_batch: padding value {value!r} of string component {path} must be a string")
    if isinstance(value, (bool, np.bool_)) and not isinstance(value, np.ndarray):
        if dtype.kind != "b":
            raise TypeError(f"padded_batch: padding value {value!r} of component {path} is a bool; the component "
                            f"is {dtype.name}")
        return np.bool_(value)
    if isinstance(value, (np.generic, np.ndarray)):  # numpy values: exactly the component's dtype (as TF)
        if value.dtype != dtype:
            raise TypeError(f"padded_batch: padding value of component {path} has dtype {value.dtype.name}; "
                            f"the component is {dtype.name}")
        return dtype.type(value)
    if isinstance(value, numbers.Integral):  # documented deviation: any Python int that fits
        if dtype.kind in "iu" and np.iinfo(dtype).min <= value <= np.iinfo(dtype).max:
            return dtype.type(value)
        if dtype.kind in "fc" and dtype.type(value) == value:
            return dtype.type(value)
        raise TypeError(f"padded_batch: padding value {value} does not fit component {path} of dtype {dtype.name}")
    if isinstance(value, numbers.Real):
        if dtype.kind not in "fc":
            raise TypeError(f"padded_batch: padding value {value!r} of component {path} is a float; the "
                            f"component is {dtype.name}")
        return dtype.type(value)
    raise TypeError(f"padded_batch: padding value {value!r} of component {path} is not a scalar number, bool or "
                    "string")


__all__ = ["PaddedBatch", "LeafPlan", "default_padding", "padding_scalar"]
