"""Helpers shared by node definitions: argument checks, calling user functions, sampling an element."""

from __future__ import annotations

import inspect
import numbers

import numpy as np

from .. import structure
from ..errors import InvalidArgumentError
from .base import INFINITE, UNKNOWN, Node

AUTOTUNE = -1
SHARD_HINT = -1


def call(fn, element):
    """Call a user function the way tf.data does: a top-level (plain) tuple is spread into positional
    arguments; namedtuples, dicts and leaves are passed as one argument."""
    if type(element) is tuple:
        return fn(*element)
    return fn(element)


def arity(spec) -> int:
    return len(spec) if type(spec) is tuple else 1


def check_signature(fn, input_node: Node, transformation: str, extra_args: int = 0) -> None:
    """Raise TypeError at construction when ``fn`` cannot take the element's unpacked arguments."""
    if not callable(fn):
        raise TypeError(f"{transformation}: the function must be callable, got {type(fn).__name__}")
    if input_node.lazy_spec:
        return  # finding the input's structure would run user code; the call itself will tell
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # builtins and C functions: nothing to check
    n = arity(input_node.element_spec) + extra_args
    try:
        sig.bind(*([None] * n))
    except TypeError as e:
        raise TypeError(
            f"{transformation}: function {getattr(fn, '__qualname__', fn)!r} cannot take the {n} "
            f"positional argument(s) its input elements unpack to ({structure.describe(input_node.element_spec)}):"
            f" {e}") from None


def check_int(value, name: str, transformation: str) -> int:
    if value is None:  # tf.data converts the argument to a tensor: None is a ValueError there, not a TypeError
        raise ValueError(f"{transformation}: `{name}` must be an integer, got None.")
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)):
        if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iu":
            return int(value)
        raise TypeError(f"{transformation}: `{name}` must be an integer, got {value!r} ({type(value).__name__})")
    return int(value)


def check_bool(value, name: str, transformation: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{transformation}: `{name}` must be a bool, got {value!r}")
    return value


def check_parallelism(value, transformation: str):
    if value is None:
        return None
    value = check_int(value, "num_parallel_calls", transformation)
    if value <= 0 and value != AUTOTUNE:
        raise InvalidArgumentError(
            f"{transformation}: num_parallel_calls must be greater than zero or AUTOTUNE, got {value}.",
            transformation)
    return value


def warn_deterministic_without_parallelism(deterministic, num_parallel_calls, transformation):
    if deterministic is not None and num_parallel_calls is None:
        import warnings

        warnings.warn(
            f"{transformation}: The `deterministic` argument has no effect unless the `num_parallel_calls` "
            "argument is specified.", UserWarning, stacklevel=4)


def sample_element(node: Node):
    """One element of ``node``, cheaply where possible, to infer what a function returns.

    Nodes whose spec equals their input's delegate to it (no shuffle buffer is filled); random-access
    nodes fetch index 0; anything else runs a throw-away iterator for one element. Raises StopIteration
    for an empty input."""
    hook = getattr(node, "sample", None)
    if hook is not None:
        return hook()
    if node.random_access():
        if node.length() == 0:
            raise StopIteration
        return node.element_at(0)
    return first_element(node)


def first_element(node: Node):
    """The first element of a throw-away iterator of ``node``; StopIteration for an empty one."""
    from ..engine.context import IteratorContext

    ctx = IteratorContext()
    it = ctx.build(node)
    try:
        return it.next()
    finally:
        it.close()
        ctx.close()


UNKNOWN_SPEC = structure.TensorSpec(None, object)


class _NoPlaceholder(Exception):
    """An input spec no placeholder element can be built for (unknown rank, dataset leaves)."""


def sample_for_spec(input_node: Node):
    """``(element, is_placeholder)``: an element to run a function on to learn its result's spec, or
    ``(None, True)`` when there is none.

    A real element where the input has one (``sample_element``). For an empty input, a placeholder built
    from the input's spec -- zeros (``b""`` for strings), every unknown dimension 1 -- as tf.data traces
    with symbolic tensors: the result's structure, dtypes and ranks are what the function returns for
    any element of that spec (its dimensions are not used: the spec leaves them unknown). Without it, an
    empty inner dataset would hand an outer flat_map or a padded_batch a spec of unknown rank and dtype."""
    try:
        return sample_element(input_node), False
    except StopIteration:
        pass
    try:
        return structure.map_structure(_placeholder_leaf, input_node.element_spec), True
    except _NoPlaceholder:
        return None, True


def _placeholder_leaf(spec):
    if isinstance(spec, structure.DatasetSpec):
        # an empty dataset of that spec (a window of an empty input, a map's datasets): a function that builds
        # on it -- flat_map(lambda w: w.batch(n)) -- gives the spec it gives any dataset of the spec
        from .elements import dataset_of_rows

        return dataset_of_rows(structure.map_structure(_no_rows, spec.element_spec))
    if not isinstance(spec, structure.TensorSpec):
        raise _NoPlaceholder
    value = _zeros(spec, ())
    return value[()] if not value.ndim else value


def _no_rows(spec):
    """A leaf of no rows of ``spec``'s elements (for ``dataset_of_rows``)."""
    if type(spec) is not structure.TensorSpec:
        raise _NoPlaceholder  # (ragged, sparse, nested datasets)
    return _zeros(spec, (0,))


def _zeros(spec, lead: tuple) -> np.ndarray:
    """Zeros of ``spec`` (``b""`` for strings) with the ``lead`` dimensions first, every unknown dimension 1."""
    if spec.shape is None or spec == UNKNOWN_SPEC:
        raise _NoPlaceholder  # (unknown rank)
    shape = lead + tuple(1 if d is None else d for d in spec.shape)
    if spec.dtype == structure.STRING:
        out = np.empty(shape, dtype=object)
        out.fill(b"")
        return out
    return np.zeros(shape, dtype=spec.dtype)


SPEC_TRIES = 16  # elements a function's result spec is tried on when the first element fails


def call_for_spec(run, input_node: Node):
    """``run(element)`` on ``sample_for_spec``'s element, or None when there is no element or a placeholder
    made ``run`` (the user's function) fail. Where the first element is an error -- the input's, or ``run``'s
    on it -- the input's next elements are tried (``_spec_from_later``)."""
    try:
        element, is_placeholder = sample_for_spec(input_node)
    except Exception as first:  # noqa: BLE001 - the input's first element is an error
        return _spec_from_later(run, input_node, first)
    if element is None:
        return None
    if is_placeholder:
        try:
            return run(element)
        except Exception:  # noqa: BLE001 - a function need not accept a placeholder; the spec stays unknown
            return None
    try:
        return run(element)
    except Exception as first:  # noqa: BLE001
        return _spec_from_later(run, input_node, first)


def _spec_from_later(run, input_node: Node, first: Exception):
    """``run`` on the first of the input's first ``SPEC_TRIES`` elements that the input and ``run`` both take,
    else on a placeholder of the input's spec (as for an empty input); ``first`` (the first element's error)
    raised when neither gives a spec. tf.data learns a function's result spec by
    tracing it and meets data errors only when iterating: ``map(parse).ignore_errors()`` over a bad first
    record has a spec there, and a pipeline whose first batch is an error still builds (the error comes with
    that batch). Only an input whose first element fails pays for the throw-away iterator."""
    from ..engine.context import IteratorContext

    it = IteratorContext().build(input_node)
    try:
        for _ in range(SPEC_TRIES):
            try:
                element = it.next()
            except StopIteration:
                break
            except Exception:  # noqa: BLE001 - an error in the input's place: the next element
                continue
            try:
                return run(element)
            except Exception:  # noqa: BLE001 - the function fails on this one too
                continue
    finally:
        it.close()
    try:
        return run(structure.map_structure(_placeholder_leaf, input_node.element_spec))
    except Exception:  # noqa: BLE001 - no placeholder, or the function fails on it: the data's error it is
        raise first from None


class PassThrough(Node):
    """A node with one input whose elements have the input's spec (shuffle, take, prefetch, ...)."""

    def compute_spec(self):
        return self.inputs[0].element_spec

    @property
    def lazy_spec(self):
        return self.inputs[0].lazy_spec

    def sample(self):
        return sample_element(self.inputs[0])


__all__ = ["AUTOTUNE", "SHARD_HINT", "INFINITE", "UNKNOWN", "call", "check_bool", "check_int", "check_parallelism",
           "check_signature", "sample_element", "sample_for_spec", "call_for_spec",
           "PassThrough", "UNKNOWN_SPEC"]
