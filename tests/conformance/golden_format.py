"""The golden files' encoding, shared by the recorder (TensorFlow side) and the test (jaxfeed side).

Both sides first turn an element into plain numpy values (strings as ``bytes``; a dataset-valued leaf,
such as a window, as ``DatasetValue(list of its elements)``), then ``encode_element`` turns that into JSON:

- a leaf: ``{"t": "leaf", "py": "bytes"|"generic"|"ndarray"|"<type name>", "dtype": "int64"|"string"|...,
  "shape": [...], "value": nested lists}``; string values are ``bytes.decode("latin-1")`` (exact bytes);
- ``{"t": "tuple", "items": [...]}``, ``{"t": "namedtuple", "name": .., "fields": [..], "items": [..]}``,
  ``{"t": "dict", "keys": [...], "items": [...]}`` (keys in the order iteration gives them);
- ``{"t": "dataset", "elements": [...]}``.

Specs: ``{"t": "tensor", "shape": [..] or null, "dtype": ..}``, ``{"t": "dataset_spec", "spec": ..}``,
nests as for elements (``spec`` instead of ``items``), ``{"t": "other", "repr": ..}``.
Errors: ``{"class": builtin-or-jaxfeed.errors name, "tf_class": .., "phase": "build"|"iter", "after": n,
"message": ..}``.

Only numpy and the standard library here (the recorder's Python has no jaxfeed).
"""

from __future__ import annotations

import re

import numpy as np


class DatasetValue:
    """A dataset-valued leaf, already iterated: its elements (plain numpy structures)."""

    __slots__ = ("elements",)

    def __init__(self, elements):
        self.elements = list(elements)


def is_namedtuple(x) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def dtype_name(dtype) -> str:
    dtype = np.dtype(dtype)
    if dtype.kind in "OSU":
        return "string"
    return dtype.name


def _strings(value):
    if isinstance(value, list):
        return [_strings(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, str):
        return {"str": value}  # a str where bytes were expected: kept visible, never equal to bytes
    return {"other": repr(value)}


def encode_leaf(x) -> dict:
    if isinstance(x, bytes):
        return {"t": "leaf", "py": "bytes", "dtype": "string", "shape": [], "value": x.decode("latin-1")}
    if isinstance(x, str):
        return {"t": "leaf", "py": "str", "dtype": "string", "shape": [], "value": {"str": x}}
    if isinstance(x, (np.ndarray, np.generic)):
        py = "ndarray" if isinstance(x, np.ndarray) else "generic"
        arr = np.asarray(x)
        name = dtype_name(arr.dtype)
        if name == "string":
            value = _strings(arr.tolist())
        else:
            value = arr.tolist()
        return {"t": "leaf", "py": py, "dtype": name, "shape": list(arr.shape), "value": value}
    value = re.sub(r" at 0x[0-9a-fA-F]+", "", repr(x))[:200]  # no addresses: goldens stay stable
    return {"t": "leaf", "py": type(x).__name__, "dtype": None, "shape": None, "value": value}


def encode_element(x) -> dict:
    if isinstance(x, DatasetValue):
        return {"t": "dataset", "elements": [encode_element(e) for e in x.elements]}
    if is_namedtuple(x):
        return {"t": "namedtuple", "name": type(x).__name__, "fields": list(type(x)._fields),
                "items": [encode_element(v) for v in x]}
    if isinstance(x, tuple):
        return {"t": "tuple", "items": [encode_element(v) for v in x]}
    if isinstance(x, list):  # never an element structure in tf.data; kept visible if it appears
        return {"t": "list", "items": [encode_element(v) for v in x]}
    if isinstance(x, dict):
        return {"t": "dict", "keys": [_key(k) for k in x], "items": [encode_element(v) for v in x.values()]}
    return encode_leaf(x)


def _key(k):
    if isinstance(k, (str, int)) and not isinstance(k, bool):
        return k
    if isinstance(k, (np.integer,)):
        return int(k)
    return repr(k)


def encode_nest(spec, encode_leaf_spec):
    """Encode a spec structure; ``encode_leaf_spec`` turns one side's leaf spec into a dict."""
    if is_namedtuple(spec):
        return {"t": "namedtuple", "name": type(spec).__name__, "fields": list(type(spec)._fields),
                "spec": [encode_nest(v, encode_leaf_spec) for v in spec]}
    if isinstance(spec, tuple):
        return {"t": "tuple", "spec": [encode_nest(v, encode_leaf_spec) for v in spec]}
    if isinstance(spec, dict):
        return {"t": "dict", "keys": [_key(k) for k in spec],
                "spec": [encode_nest(v, encode_leaf_spec) for v in spec.values()]}
    return encode_leaf_spec(spec)


def error_record(message, phase: str, after: int, class_name: str, tf_class: str | None = None):
    return {"class": class_name, "tf_class": tf_class or class_name, "phase": phase, "after": after,
            "message": str(message)[:300]}
