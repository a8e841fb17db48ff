"""``scan``: a running state through the elements; ``scan_func(state, element) -> (new_state, output)``."""

from __future__ import annotations

import inspect

import numpy as np

from .. import structure
from .base import Node
from .common import UNKNOWN_SPEC, call_for_spec
from .signature import ConformScan, check_signature_structure, relax, unwrap


class Scan(Node):
    """tf.data's ``scan``: ``scan_func`` gets the state and the element as two arguments (a tuple element
    is passed whole, not spread) and returns ``(new_state, output)``. The new state must keep the initial
    state's structure and dtypes (TypeError naming scan otherwise); its shapes may change. The cardinality
    is the input's.

    The element spec is ``output_signature`` when given (every output is checked against it), else the
    structure, dtypes and ranks of the first step's output, every dimension unknown: the state, and with
    it the output, may grow from step to step."""

    kind = "Scan"

    def __init__(self, input_node, initial_state, scan_func, output_signature=None):
        super().__init__((input_node,))
        if not callable(scan_func):
            raise TypeError(f"scan: `scan_func` must be callable, got {type(scan_func).__name__}")
        self.initial_state = structure.normalize_data(initial_state, "scan initial_state")
        _check_takes_two(scan_func)
        self.output_signature = output_signature
        if output_signature is not None:
            check_signature_structure(output_signature, "scan")
            name = getattr(scan_func, "__qualname__", type(scan_func).__name__)
            scan_func = ConformScan(scan_func, output_signature, f"scan({name})")
        self.scan_func = scan_func

    @property
    def lazy_spec(self):
        return self.output_signature is None

    def params(self):
        p = {"initial_state": self.initial_state, "scan_func": unwrap(self.scan_func)}
        if self.output_signature is not None:
            p["output_signature"] = self.output_signature
        return p

    def functions(self):
        return {"scan_func": unwrap(self.scan_func)}

    def compute_spec(self):
        if self.output_signature is not None:
            return self.output_signature
        def output_spec(element):
            return relax(structure.spec_of(step(self.scan_func, self.initial_state, element, self.label())[1]))

        spec = call_for_spec(output_spec, self.inputs[0])
        return UNKNOWN_SPEC if spec is None else spec

    def cardinality(self):
        return self.inputs[0].cardinality()


def _check_takes_two(fn):
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # builtins: nothing to check
    try:
        signature.bind(None, None)
    except TypeError as e:
        raise TypeError(f"scan: `scan_func` must take two arguments (state, element): {e}") from None


def _dtype(leaf):
    return structure.STRING if isinstance(leaf, bytes) else getattr(leaf, "dtype", None)


def step(fn, state, element, label: str):
    """``(new_state, output)`` of one call, normalised; TypeError naming ``label`` if it is not a pair.

    The pair is the function's result, so only it is "top level": a list state or output inside it is one
    array, as in tf.data (``scan([0, 1], lambda s, _: ([s[1], s[0] + s[1]], s[0]))`` keeps an int32[2]
    state), while a top-level list pair is a tuple."""
    result = fn(state, element)
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise TypeError(f"{label}: `scan_func` must return a pair (new_state, output), got "
                        f"{type(result).__name__}.")
    return (structure.normalize_inner(result[0], f"new state of {label}"),
            structure.normalize_inner(result[1], f"output of {label}"))


def leaf_dtypes(state) -> list:
    return [_dtype(x) for x in structure.flatten(state)]


def check_new_state(initial, dtypes: list, new_state, label: str) -> None:
    """TypeError unless ``new_state`` has the structure and leaf dtypes (``leaf_dtypes(initial)``) of
    ``initial`` (tf.data's rule for scan and reduce; shapes may change)."""
    if type(new_state) is type(initial) and isinstance(initial, np.generic):
        return  # a numpy scalar's type is its dtype: the common case, checked without walking
    if not structure.same_structure(initial, new_state) or leaf_dtypes(new_state) != dtypes:
        raise TypeError(f"{label}: the new state must keep the initial state's structure and dtypes: initial "
                        f"{structure.spec_of(initial)!r}, new {structure.spec_of(new_state)!r}.")
