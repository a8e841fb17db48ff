"""Declared output signatures, and the honest specs used without one.

A spec is a promise about *every* element. A transformation that runs a user function only sees the
function's result on one sample element, so without a declaration it promises what that sample can prove
and no more: the structure, the dtypes and the ranks, with every dimension unknown (``relax``). A user
who needs static dimensions declares them with ``output_signature=`` (map, flat_map, interleave, scan,
from_generator); the declaration becomes the spec and is checked on every element at run time:
``InvalidArgumentError`` naming the transformation and the element on the first one that breaks it.

Checking and converting (``conform``): the structure must match (a list is accepted where a tuple is
declared, as tf.data packs a top-level list); a numpy value must have exactly the declared dtype (never
cast silently); a Python value (int, float, bool, str, list) becomes the declared dtype when that keeps
its value, else raises; every known dimension must match.
"""

from __future__ import annotations

import numpy as np

from .. import structure
from ..errors import InvalidArgumentError
from .common import UNKNOWN_SPEC, PassThrough, call, call_for_spec
from .dataset_class import dataset_of, wrap


# ---------------------------------------------------------------------------------------- what users write
def dtype_of(t, transformation: str) -> np.dtype:
    """A numpy dtype from what users write: numpy types, names, ``str``/``bytes``/"string", or an object
    with ``as_numpy_dtype`` (a TensorFlow dtype in ported code)."""
    t = getattr(t, "as_numpy_dtype", t)
    if t is str or t is bytes or (isinstance(t, str) and t in ("string", "str", "bytes")):
        return structure.STRING
    try:
        dtype = np.dtype(t)
    except TypeError:
        raise TypeError(f"{transformation}: {t!r} is not a dtype.") from None
    return structure.STRING if dtype.kind in "OSU" else dtype


def shape_of(s, transformation: str):
    """A shape tuple (None for unknown dims; None for an unknown rank) from a tuple, list or TensorShape."""
    if s is None:
        return None
    dims = getattr(s, "as_list", None)
    s = dims() if dims is not None else s
    try:
        return tuple(None if d is None or d == -1 else int(d) for d in s)
    except TypeError:
        raise TypeError(f"{transformation}: {s!r} is not a shape.") from None


def check_signature_structure(signature, transformation: str, path: str = "output_signature") -> None:
    """TypeError unless ``signature`` is a TensorSpec/DatasetSpec or a tuple/dict nest of them."""
    if isinstance(signature, list):
        raise TypeError(f"{transformation}: {path} is a list; use a tuple for a structure of components.")
    if isinstance(signature, tuple):
        for i, s in enumerate(signature):
            check_signature_structure(s, transformation, f"{path}[{i}]")
    elif isinstance(signature, dict):
        for k, s in signature.items():
            check_signature_structure(s, transformation, f"{path}[{k!r}]")
    elif isinstance(signature, structure.DatasetSpec):
        check_signature_structure(signature.element_spec, transformation, f"{path}.element_spec")
    elif not isinstance(signature, structure.TensorSpec):
        raise TypeError(f"{transformation}: {path} must be a TensorSpec (or a structure of them), got "
                        f"{type(signature).__name__}.")


# ------------------------------------------------------------------------------------------- honest specs
def relax(spec):
    """``spec`` with every dimension unknown (rank, dtype and structure kept): what one sample proves."""
    def leaf(s):
        if isinstance(s, structure.DatasetSpec):
            return structure.DatasetSpec(relax(s.element_spec))
        if s.shape is None:
            return s
        return type(s)((None,) * len(s.shape), s.dtype)  # (a RaggedSpec or SparseSpec stays one)

    return structure.map_structure(leaf, spec)


def spec_from_function(fn, input_node: Node, transform_output=None):
    """The spec of ``fn``'s results, from its result on a sample element (tf.data traces; we run once on
    real data). One result proves structure, dtypes and ranks, not dimensions: every dimension is unknown
    (``relax``); a declared ``output_signature`` is how a user promises more."""
    def spec_of_result(out):
        if transform_output is not None:
            out = transform_output(out)
        return relax(structure.spec_of(structure.normalize(out)))

    spec = call_for_spec(lambda element: spec_of_result(call(fn, element)), input_node)
    return UNKNOWN_SPEC if spec is None else spec


# ------------------------------------------------------------------------------------------------ checking
class SignatureMismatch(InvalidArgumentError):
    """An element that breaks a declared ``output_signature``."""


def conform(value, signature, where: str):
    """``value`` as an element of ``signature`` (see the module docstring); SignatureMismatch otherwise.
    ``where`` names the transformation and the element for the message."""
    out = _conform(value, signature, "", where)
    return structure.normalize(out, where)


def _mismatch(where, path, detail):
    at = f" at {path}" if path else ""
    return SignatureMismatch(f"{where}: the element does not match the declared output_signature{at}: {detail}")


def _conform(value, spec, path, where):
    if isinstance(spec, tuple):
        if not isinstance(value, (tuple, list)) or len(value) != len(spec):
            raise _mismatch(where, path, f"expected {structure.describe(spec)}, got {_sketch(value)}")
        items = [_conform(v, s, f"{path}[{i}]", where) for i, (v, s) in enumerate(zip(value, spec))]
        return type(spec)(*items) if structure.is_namedtuple(spec) else tuple(items)
    if isinstance(spec, dict):
        if not isinstance(value, dict) or set(value) != set(spec):
            raise _mismatch(where, path, f"expected {structure.describe(spec)}, got {_sketch(value)}")
        return {k: _conform(value[k], spec[k], f"{path}[{k!r}]", where) for k in value}
    if isinstance(spec, structure.DatasetSpec):
        node = getattr(value, "_node", None)
        if node is None:
            raise _mismatch(where, path, f"expected a Dataset, got {type(value).__name__}")
        at = f" at {path}" if path else ""
        return wrap(SignatureCheck(node, spec.element_spec, f"{where}, the dataset{at}"))
    return _conform_leaf(value, spec, path, where)


def _sketch(value) -> str:
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if isinstance(value, (tuple, dict)):
        return structure.describe(value)
    return f"a {type(value).__name__}"


def _conform_leaf(value, spec, path, where):
    if isinstance(value, (tuple, dict)) or getattr(value, "_node", None) is not None:
        raise _mismatch(where, path, f"expected a tensor {spec!r}, got {_sketch(value)}")
    if value is None:
        raise _mismatch(where, path, "got None")
    is_numpy = isinstance(value, (np.ndarray, np.generic)) and value.dtype.kind not in "SU"
    try:
        arr = structure.to_array(value, where)
    except (TypeError, ValueError, OverflowError) as e:  # not a tensor value at all (a set, 2**70, ...)
        raise _mismatch(where, path, f"{type(e).__name__}: {e}") from None
    dtype = structure.STRING if isinstance(arr, bytes) else arr.dtype
    if not structure.dtypes_compatible(spec.dtype, dtype):
        if is_numpy or spec.dtype == structure.STRING or dtype == structure.STRING:
            raise _mismatch(where, path, f"got {structure.dtype_name(dtype)}, the signature declares "
                                         f"{structure.dtype_name(spec.dtype)}")
        # a Python number or list: from its own value (not via the int32/float32 default) to the declared dtype
        try:
            exact = np.asarray(value)
        except (OverflowError, ValueError):
            exact = np.asarray(arr)
        arr = _lossless_cast(exact if exact.dtype.kind in "biuf" else np.asarray(arr), spec.dtype, path, where)
    shape = np.shape(arr)
    if not structure.shape_compatible(spec.shape, shape):
        raise _mismatch(where, path, f"got shape {shape}, the signature declares {_shape_text(spec.shape)}")
    return arr


def _shape_text(shape):
    return "an unknown shape" if shape is None else str(tuple(shape))


def _lossless_cast(arr, dtype, path, where):
    """A Python value converted by default (int32, float32, ...) into the declared ``dtype``, if no value
    changes."""
    if arr.dtype.kind not in "biuf" or dtype.kind not in "biufc" or ((dtype.kind == "b") != (arr.dtype.kind == "b")):
        raise _mismatch(where, path, f"got {arr.dtype.name}, the signature declares {structure.dtype_name(dtype)}")
    with np.errstate(all="ignore"):
        out = arr.astype(dtype)
        if dtype.kind in "iu":
            exact = bool(np.all(np.isfinite(arr))) and np.array_equal(out, arr)
        else:  # rounding a float is fine (as converting 0.1 to float32 is), overflow is not
            exact = not np.any(np.isinf(out) & ~np.isinf(arr))
    if not exact:
        raise _mismatch(where, path, f"a value that {dtype.name} cannot hold without loss: {arr!r:.60}")
    return out[()] if out.ndim == 0 else out


def conform_batch(value, signature, where: str):
    """A vectorized map's result on a whole batch: every leaf has one more leading dimension (the same for
    all leaves) than the signature declares."""
    batched = structure.map_structure(
        lambda s: s if isinstance(s, structure.DatasetSpec) else s.with_leading(None), signature)
    out = conform(value, batched, where)
    sizes = {np.shape(x)[0] for x in structure.flatten(out) if np.ndim(x)}
    if len(sizes) > 1:
        raise _mismatch(where, "", f"the batch's leaves have different leading sizes {sorted(sizes)}")
    return out


# ------------------------------------------------------------------------------------- function wrappers
class Conform:
    """``map_func`` checked against a declared signature (picklable, for process workers). ``on_batch`` is
    the call a fused ``vectorized`` map makes on a whole batch (``iterators/map_batch.py``); when that check
    fails, the stage re-runs the batch element by element, so the error names the element."""

    def __init__(self, fn, signature, where: str):
        self.fn, self.signature, self.where = fn, signature, where
        self.__qualname__ = self.__name__ = getattr(fn, "__qualname__", type(fn).__name__)

    def __call__(self, *args):
        return conform(self.fn(*args), self.signature, self.where)

    def on_batch(self, *args):
        return conform_batch(self.fn(*args), self.signature, self.where)


class ConformScan(Conform):
    """``scan_func`` whose *output* is checked against the declared signature (the state is not)."""

    def __call__(self, state, element):
        result = self.fn(state, element)
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            return result  # scan reports a result that is not a pair itself
        return result[0], conform(result[1], self.signature, self.where)


class ConformDatasets(Conform):
    """A flat_map/interleave ``map_func`` whose datasets' elements are checked against the signature."""

    def __call__(self, *args):
        node = dataset_of(self.fn(*args), self.where.split("(")[0])
        what = f"{self.where}, the dataset map_func returned for input {_short_value(args)}"
        return wrap(SignatureCheck(node, self.signature, what))


def _short_value(args) -> str:
    """The input element for a message: scalars by value, arrays by dtype and shape."""
    def one(x):
        if isinstance(x, np.generic):
            return repr(x.item())
        if isinstance(x, np.ndarray):
            return f"<{x.dtype}{list(x.shape)}>"
        return repr(x)

    text = one(args[0]) if len(args) == 1 else "(" + ", ".join(map(one, args)) + ")"
    return text if len(text) <= 60 else text[:57] + "..."


def unwrap(fn):
    """The user's function inside a signature wrapper (for fingerprints, inspection and messages)."""
    return fn.fn if isinstance(fn, Conform) else fn


# ------------------------------------------------------------------------------------------- check node
class SignatureCheck(PassThrough):
    """The elements of its input, each checked against ``signature`` (the spec it promises)."""

    kind = "SignatureCheck"

    def __init__(self, input_node, signature, where: str):
        super().__init__((input_node,))
        self.signature, self.where = signature, where

    @property
    def lazy_spec(self):
        return False

    def params(self):
        return {"signature": self.signature}

    def compute_spec(self):
        return self.signature

    def sample(self):
        from .common import sample_element

        return conform(sample_element(self.inputs[0]), self.signature, f"{self.where}, element 0")

    def cardinality(self):
        return self.inputs[0].cardinality()


__all__ = ["Conform", "ConformDatasets", "ConformScan", "SignatureCheck", "SignatureMismatch",
           "check_signature_structure", "conform", "dtype_of", "relax", "shape_of", "spec_from_function", "unwrap"]
