"""``from_generator``: elements from a Python generator, checked against a declared signature."""

from __future__ import annotations

import numpy as np

from .. import structure
from .base import UNKNOWN, Node
from .signature import dtype_of, shape_of


def _dtype(t) -> np.dtype:
    return dtype_of(t, "from_generator")


def _shape(s):
    return shape_of(s, "from_generator")


def _signature_from_types(types, shapes, path="output_types"):
    """TensorSpecs from ``output_types`` and ``output_shapes`` matched up to the types' structure."""
    if isinstance(types, list):
        raise TypeError(f"from_generator: {path} is a list; use a tuple for a structure of components.")
    if isinstance(types, tuple):
        if shapes is not None and (not isinstance(shapes, (tuple, list)) or len(shapes) != len(types)):
            raise ValueError(f"from_generator: `output_shapes` {shapes!r} does not match the structure of "
                             f"`output_types` {types!r}.")
        specs = [_signature_from_types(t, None if shapes is None else shapes[i], f"{path}[{i}]")
                 for i, t in enumerate(types)]
        return type(types)(*specs) if structure.is_namedtuple(types) else tuple(specs)
    if isinstance(types, dict):
        if shapes is not None and (not isinstance(shapes, dict) or set(shapes) != set(types)):
            raise ValueError(f"from_generator: `output_shapes` {shapes!r} does not match the structure of "
                             f"`output_types` {types!r}.")
        return {k: _signature_from_types(t, None if shapes is None else shapes[k], f"{path}[{k!r}]")
                for k, t in types.items()}
    return structure.TensorSpec(_shape(shapes), _dtype(types))


def _check_signature(signature, path="output_signature"):
    if isinstance(signature, list):
        raise TypeError(f"from_generator: {path} is a list; use a tuple for a structure of components.")
    if isinstance(signature, tuple):
        for i, s in enumerate(signature):
            _check_signature(s, f"{path}[{i}]")
    elif isinstance(signature, dict):
        for k, s in signature.items():
            _check_signature(s, f"{path}[{k!r}]")
    elif not isinstance(signature, structure.TensorSpec):
        raise TypeError(f"from_generator: {path} must be a TensorSpec (or a structure of them), got "
                        f"{type(signature).__name__}.")


class Generator(Node):
    """tf.data's ``from_generator`` [docs/tf-behaviour.md#from-generator]: each iterator calls ``generator(*args)`` again and checks
    every yielded element against the signature (InvalidArgumentError for a wrong structure or shape; an
    exception in the generator becomes an InvalidArgumentError carrying its text, after the elements
    yielded before it).

    Deliberate differences from tf.data: a value that does not fit the declared dtype without loss
    (1.5 or 2**40 into int32) raises InvalidArgumentError instead of being cast silently; and iterators
    can save their state by *replay*: the state is the number of elements consumed, and a restore calls
    the generator again and skips that many. That is only correct for a generator that yields the same
    sequence every time, so it needs the user's word: ``replayable=True``. Otherwise saving raises
    FailedPreconditionError (tf.data's default) unless ``Options.experimental_external_state_policy`` is
    ``WARN`` (log a warning and save by replay) or ``IGNORE``.
    """

    kind = "Generator"
    is_source = True

    def __init__(self, generator, output_types=None, output_shapes=None, args=None, output_signature=None,
                 replayable=False):
        super().__init__()
        if not isinstance(replayable, bool):
            raise TypeError(f"from_generator: `replayable` must be a bool, got {replayable!r}.")
        self.replayable = replayable  # the user's promise that a second call yields the same sequence
        if not callable(generator):
            raise TypeError("from_generator: `generator` must be a Python callable.")
        if output_signature is not None:
            if output_types is not None:
                raise TypeError("from_generator: the `output_types` argument can not be used together with "
                                "the `output_signature` argument.")
            if output_shapes is not None:
                raise TypeError("from_generator: the `output_shapes` argument can not be used together with "
                                "the `output_signature` argument.")
            _check_signature(output_signature)
            self.signature = output_signature
        elif output_types is not None:
            self.signature = _signature_from_types(output_types, output_shapes)
        else:
            raise TypeError("from_generator: either `output_signature` or `output_types` must be given.")
        self.generator = generator
        self.args = () if args is None else tuple(structure.normalize_data(a, "from_generator args")
                                                   for a in args)

    def params(self):
        return {"generator": self.generator, "output_signature": self.signature, "args": self.args}

    def functions(self):
        return {"generator": self.generator}

    def compute_spec(self):
        return self.signature

    def cardinality(self):
        return UNKNOWN

    def not_replayable_because(self):
        if not self.replayable:
            return ("runs a Python generator, whose output cannot be known to be the same in every run (declare "
                    "from_generator(..., replayable=True) if it is)")
        return super().not_replayable_because()
