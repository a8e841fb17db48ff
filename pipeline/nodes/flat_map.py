"""``flat_map``: each element becomes a dataset; their elements follow one another in order."""

from __future__ import annotations

from .base import Node, ShardWalk, UNKNOWN
from .common import UNKNOWN_SPEC, call, call_for_spec, check_signature
from .dataset_class import dataset_of
from .signature import ConformDatasets, check_signature_structure, relax, unwrap


def dataset_function_spec(fn, input_node: Node, transformation: str):
    """The element spec of the datasets ``fn`` returns, from the one it returns for a sample input element:
    its structure, dtypes and ranks; every dimension unknown, since the next input's dataset may differ."""
    spec = call_for_spec(lambda element: relax(dataset_of(call(fn, element), transformation).element_spec),
                         input_node)
    return UNKNOWN_SPEC if spec is None else spec


def declared(node, map_func, output_signature, transformation: str):
    """Set up ``node.map_func`` and ``node.output_signature``: with a signature, every dataset ``map_func``
    returns is checked element by element (``nodes/signature.py``)."""
    node.output_signature = output_signature
    if output_signature is not None:
        check_signature_structure(output_signature, transformation)
        name = getattr(map_func, "__qualname__", type(map_func).__name__)
        map_func = ConformDatasets(map_func, output_signature, f"{transformation}({name})")
    node.map_func = map_func


class FlatMap(Node):
    """tf.data's ``flat_map`` [docs/tf-behaviour.md#flat-map]. ``map_func`` must return a Dataset (TypeError naming
    flat_map otherwise, raised when it returns something else). Inner datasets get no options or rewrite
    passes of their own (their ``with_options`` does not reach the outer dataset, as in tf.data).

    The element spec is ``output_signature`` when given (every inner element is checked against it), else
    the structure, dtypes and ranks of one sample inner dataset's spec, every dimension unknown."""

    kind = "FlatMap"
    shard_walk = ShardWalk.FILE_MAPPER

    def __init__(self, input_node, map_func, output_signature=None):
        super().__init__((input_node,))
        check_signature(map_func, input_node, "flat_map")
        declared(self, map_func, output_signature, "flat_map")

    @property
    def lazy_spec(self):
        return self.output_signature is None

    def params(self):
        p = {"map_func": unwrap(self.map_func)}
        if self.output_signature is not None:
            p["output_signature"] = self.output_signature
        return p

    def functions(self):
        return {"map_func": unwrap(self.map_func)}

    def compute_spec(self):
        if self.output_signature is not None:
            return self.output_signature
        return dataset_function_spec(self.map_func, self.inputs[0], "flat_map")

    def cardinality(self):
        return UNKNOWN
