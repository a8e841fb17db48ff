"""``scan``: a running state through the elements; ``scan_func(state, element) -> (new_state, output)``."""

from __future__ import annotations

import inspect

from .. import structure
from .base import Node
from .common import UNKNOWN_SPEC, sample_element


class Scan(Node):
    """tf.data's ``scan``: ``scan_func`` gets the state and the element as two arguments (a tuple element
    is passed whole, not spread) and returns ``(new_state, output)``. The new state must keep the initial
    state's structure and dtypes (TypeError naming scan otherwise); its shapes may change. The cardinality
    is the input's."""

    kind = "Scan"
    lazy_spec = True

    def __init__(self, input_node, initial_state, scan_func):
        super().__init__((input_node,))
        if not callable(scan_func):
            raise TypeError(f"scan: `scan_func` must be callable, got {type(scan_func).__name__}")
        self.initial_state = structure.normalize_data(initial_state, "scan initial_state")
        self.scan_func = scan_func
        _check_takes_two(scan_func)

    def params(self):
        return {"initial_state": self.initial_state, "scan_func": self.scan_func}

    def functions(self):
        return {"scan_func": self.scan_func}

    def compute_spec(self):
        try:
            element = sample_element(self.inputs[0])
        except StopIteration:
            return UNKNOWN_SPEC
        from ..iterators.scan import step

        return structure.spec_of(step(self.scan_func, self.initial_state, element, self.label())[1])

    def cardinality(self):
        return self.inputs[0].cardinality()

    def make_iterator(self, ctx):
        from ..iterators.scan import ScanIterator

        return ScanIterator(self, ctx)


def _check_takes_two(fn):
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # builtins: nothing to check
    try:
        signature.bind(None, None)
    except TypeError as e:
        raise TypeError(f"scan: `scan_func` must take two arguments (state, element): {e}") from None
