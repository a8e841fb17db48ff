"""``flat_map``: each element becomes a dataset; their elements follow one another in order."""

from __future__ import annotations

from .base import UNKNOWN, Node
from .common import UNKNOWN_SPEC, call, check_signature, sample_element


def dataset_of(value, transformation: str):
    """The node of the Dataset a ``flat_map``/``interleave`` function returned; TypeError for anything else."""
    node = getattr(value, "_node", None)
    if not isinstance(node, Node):
        raise TypeError(f"{transformation}: `map_func` must return a Dataset object, got "
                        f"{type(value).__name__}.")
    return node


def dataset_function_spec(fn, input_node: Node, transformation: str):
    """The element spec of the datasets ``fn`` returns, from one sample input element."""
    try:
        element = sample_element(input_node)
    except StopIteration:
        return UNKNOWN_SPEC
    return dataset_of(call(fn, element), transformation).element_spec


class FlatMap(Node):
    """tf.data's ``flat_map`` [reference 3.3]. ``map_func`` must return a Dataset (TypeError naming
    flat_map otherwise, raised when it returns something else). Inner datasets get no options or rewrite
    passes of their own (their ``with_options`` does not reach the outer dataset, as in tf.data)."""

    kind = "FlatMap"
    lazy_spec = True

    def __init__(self, input_node, map_func):
        super().__init__((input_node,))
        check_signature(map_func, input_node, "flat_map")
        self.map_func = map_func

    def params(self):
        return {"map_func": self.map_func}

    def functions(self):
        return {"map_func": self.map_func}

    def compute_spec(self):
        return dataset_function_spec(self.map_func, self.inputs[0], "flat_map")

    def cardinality(self):
        return UNKNOWN

    def make_iterator(self, ctx):
        from ..iterators.flat_map import FlatMapIterator

        return FlatMapIterator(self, ctx)
