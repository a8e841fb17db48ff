"""``tf.train.Example`` / ``SequenceExample`` without TensorFlow: builders, and the parse functions.

Parsing decodes each record with protobuf's C parser (upb; one ``FromString`` per record cannot be avoided)
and then assembles every feature of the whole batch with one ``np.fromiter``/``np.array`` over the chained
value lists, so ``map(parse)`` after ``batch`` does per-record Python work only to look features up.

Output per feature spec (a dict keyed like ``features``):

- ``FixedLenFeature(shape, dtype, default_value)``: an array of shape ``(batch,) + shape``; a missing
  feature takes ``default_value`` or raises when there is none.
- ``VarLenFeature(dtype)``: a ``VarLenValue(values, row_splits)`` -- record ``i`` holds
  ``values[row_splits[i]:row_splits[i+1]]`` (ragged). ``to_sparse()`` gives tf.SparseTensor's triple
  ``(indices, values, dense_shape)``; the ``indices`` / ``dense_shape`` properties do the same.
  ``parse_single_example`` returns the plain 1-D values array instead.
- ``FixedLenSequenceFeature(shape, dtype, allow_missing, default_value)``: in ``parse_example`` (which,
  as TF, requires ``allow_missing=True``) a feature holding any multiple of ``prod(shape)`` values, padded
  with ``default_value`` (one value; 0 or b"" when None) to the longest record: ``(batch, max_rows) + shape``.
  In ``parse_sequence_example`` (no ``default_value`` there, as TF): the feature list's steps,
  ``(batch, max_steps) + shape``, padded with 0 / b"", with the true step counts in the third result.

A Feature with no list at all is a missing feature in an Example, but present with no values in a
SequenceExample's context or feature list (as TF). Defaults are converted and reshaped at every parse,
never broadcast (docs/tf-behaviour.md#example-protos).

Strings are ``bytes`` in object arrays, integers int64, floats float32. Errors are InvalidArgumentError
naming the feature and the record index.
"""

from __future__ import annotations

import itertools
import math
import operator
from typing import NamedTuple

import numpy as np

from jaxfeed.pipeline import ragged
from jaxfeed.pipeline.errors import InvalidArgumentError

from . import example_pb2

Example = example_pb2.Example
SequenceExample = example_pb2.SequenceExample
Feature = example_pb2.Feature
Features = example_pb2.Features
FeatureList = example_pb2.FeatureList
FeatureLists = example_pb2.FeatureLists
BytesList, FloatList, Int64List = example_pb2.BytesList, example_pb2.FloatList, example_pb2.Int64List

_chain = itertools.chain.from_iterable


# ---------------------------------------------------------------------------------------------- specs
def _dtype(dtype) -> np.dtype:
    name = getattr(dtype, "name", dtype)  # tf.DType-like objects carry a name
    if name in ("string", str, bytes, object) or (isinstance(name, np.dtype) and name == object):
        return np.dtype(object)
    d = np.dtype(name)
    if d == np.int64 or d == np.float32:
        return d
    if d.kind in "SUO":
        return np.dtype(object)
    raise ValueError(f"Feature dtype must be int64, float32 or string, got {dtype!r}")


_KIND = {np.dtype(np.int64): "int64_list", np.dtype(np.float32): "float_list", np.dtype(object): "bytes_list"}


class FixedLenFeature(NamedTuple("FixedLenFeature", [("shape", tuple), ("dtype", object), ("default_value", object)])):
    def __new__(cls, shape, dtype, default_value=None):
        return super().__new__(cls, tuple(int(d) for d in shape), _dtype(dtype), default_value)


class VarLenFeature(NamedTuple("VarLenFeature", [("dtype", object)])):
    def __new__(cls, dtype):
        return super().__new__(cls, _dtype(dtype))


class FixedLenSequenceFeature(NamedTuple("FixedLenSequenceFeature", [
        ("shape", tuple), ("dtype", object), ("allow_missing", bool), ("default_value", object)])):
    def __new__(cls, shape, dtype, allow_missing=False, default_value=None):
        return super().__new__(cls, tuple(int(d) for d in shape), _dtype(dtype), bool(allow_missing), default_value)


class VarLenValue(NamedTuple("VarLenValue", [("values", np.ndarray), ("row_splits", np.ndarray)])):
    """A batch of variable-length features: record i is ``values[row_splits[i]:row_splits[i+1]]``."""

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.row_splits)

    @property
    def indices(self) -> np.ndarray:
        return ragged.sparse_indices(self.row_splits, len(self.values))

    @property
    def dense_shape(self) -> np.ndarray:
        return ragged.dense_shape(self.row_splits)

    def to_sparse(self):
        """``(indices, values, dense_shape)`` as ``tf.io.parse_example`` returns a VarLen feature."""
        return self.indices, self.values, self.dense_shape

    def to_list(self) -> list:
        return [self.values[a:b] for a, b in zip(self.row_splits[:-1], self.row_splits[1:])]


# ---------------------------------------------------------------------------------------------- builders
def parsed_signature(features: dict, batched: bool = False) -> dict:
    """The TensorSpecs of what ``parse_single_example`` (or, ``batched``, ``parse_example``) returns for
    ``features``: pass it as ``map(..., output_signature=...)`` to keep the static shapes tf.data's traced
    parse functions have (a map's spec is otherwise taken from one record, with every dimension unknown).
    FixedLen shapes are static; VarLen values (and FixedLenSequence rows) have an unknown length."""
    from jaxfeed.pipeline.structure import STRING, TensorSpec

    lead = (None,) if batched else ()
    out = {}
    for name, spec in features.items():
        dtype = STRING if spec.dtype == object else spec.dtype
        if isinstance(spec, FixedLenFeature):
            out[name] = TensorSpec(lead + spec.shape, dtype)
        elif isinstance(spec, VarLenFeature):
            values = TensorSpec((None,), dtype)
            out[name] = VarLenValue(values, TensorSpec((None,), np.int64)) if batched else values
        elif isinstance(spec, FixedLenSequenceFeature):
            out[name] = TensorSpec(lead + (None,) + spec.shape, dtype)
        else:
            raise TypeError(f"parsed_signature: unsupported feature spec for '{name}': {spec!r}")
    return out


def feature(values) -> Feature:
    """A ``Feature`` from a value or list: bytes/str -> bytes_list, floats -> float_list, ints -> int64_list."""
    items = values if isinstance(values, (list, tuple, np.ndarray)) else [values]
    f = Feature()
    if not isinstance(items, np.ndarray) and len(items) and all(isinstance(v, (bytes, str)) for v in items):
        # not through numpy: an "S" array would strip trailing NUL bytes
        f.bytes_list.value.extend(v.encode("utf-8") if isinstance(v, str) else v for v in items)
        return f
    arr = np.asarray(items, dtype=object if isinstance(items, np.ndarray) and items.dtype.kind == "O" else None)
    if arr.size == 0 and arr.dtype.kind not in "SUO":
        f.int64_list.SetInParent()  # an empty list still has a kind (docs/tf-behaviour.md#example-protos)
    elif arr.dtype.kind in "SUO":
        f.bytes_list.value.extend(v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in arr.reshape(-1).tolist())
    elif arr.dtype.kind == "f":
        f.float_list.value.extend(arr.reshape(-1).astype(np.float32).tolist())
    elif arr.dtype.kind in "iub":
        f.int64_list.value.extend(arr.reshape(-1).astype(np.int64).tolist())
    else:
        raise TypeError(f"cannot make a Feature from {values!r}")
    return f


def make_example(features: dict) -> Example:
    """``make_example({"id": [1], "text": [b"x"]})``; values may also be ``Feature`` messages."""
    ex = Example()
    for name, values in features.items():
        ex.features.feature[name].CopyFrom(values if isinstance(values, Feature) else feature(values))
    return ex


def make_sequence_example(context: dict, feature_lists: dict) -> SequenceExample:
    """``context`` like ``make_example``; ``feature_lists`` maps a name to a list of steps' values."""
    ex = SequenceExample()
    for name, values in context.items():
        ex.context.feature[name].CopyFrom(values if isinstance(values, Feature) else feature(values))
    for name, steps in feature_lists.items():
        fl = ex.feature_lists.feature_list[name]
        for step in steps:
            fl.feature.add().CopyFrom(step if isinstance(step, Feature) else feature(step))
    return ex


# ---------------------------------------------------------------------------------------------- parsing
_ONE_RECORD = (bytes, bytearray, memoryview, np.bytes_, str)


def _records(serialized, what: str) -> list:
    """A batch of serialized records as a list of ``bytes``: a list/tuple (nested lists are flattened) or
    an array of bytes-like values (``bytes``, ``bytearray``, ``memoryview``, numpy bytes scalars).
    Anything else -- a ``str`` (its encoding is not ours to guess), None, a number -- is refused with
    InvalidArgumentError naming the record, never converted (``bytes(5)`` would be five zero bytes)."""
    if isinstance(serialized, _ONE_RECORD):
        raise InvalidArgumentError(f"{what}: expected a 1-D batch of serialized records, got one record "
                                   f"(use the parse_single_ variant).", what)
    if isinstance(serialized, np.ndarray):
        items = serialized.reshape(-1).tolist() if serialized.dtype.kind in "SO" else None
    elif isinstance(serialized, (list, tuple)):
        items = []
        _flatten_records(serialized, items)
    else:
        items = None
    if items is None:
        raise InvalidArgumentError(f"{what}: expected a 1-D batch of serialized records (bytes), got "
                                   f"{_describe(serialized)}.", what)
    if set(map(type, items)) <= {bytes}:  # the common case, checked in C
        return items
    return [v if type(v) is bytes else _as_record(v, i, what) for i, v in enumerate(items)]


def _flatten_records(value, out: list):
    for v in value:
        if isinstance(v, (list, tuple)) or (isinstance(v, np.ndarray) and v.ndim):
            _flatten_records(v, out)
        else:
            out.append(v)


def _as_record(value, index: int, what: str) -> bytes:
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if isinstance(value, (bytes, bytearray, np.bytes_)):
        return bytes(value)
    if isinstance(value, memoryview):
        return value.tobytes()
    raise InvalidArgumentError(f"{what}: record {index} is {_describe(value)}, not a serialized record (bytes, "
                               "bytearray or memoryview; a str must be encoded by the caller).", what)


def _describe(value) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40] + '...' if len(text) > 40 else text}"


def _single(serialized, what: str):
    """The one record given to a ``parse_single_`` function (bytes-like, or a 0-d array of one)."""
    if isinstance(serialized, np.ndarray):
        if serialized.ndim != 0:
            raise InvalidArgumentError(f"{what}: expected one serialized record, got an array of shape "
                                       f"{serialized.shape} (use the batch variant).", what)
        serialized = serialized.item()
    return _as_record(serialized, 0, what)


def _decode(message, records: list, what: str) -> list:
    try:
        return list(map(message.FromString, records))
    except Exception:  # noqa: BLE001 - find which record, for the message
        for i, r in enumerate(records):
            try:
                message.FromString(r)
            except Exception as e:  # noqa: BLE001
                raise InvalidArgumentError(f"{what}: could not parse record {i} as {message.__name__}: {e}",
                                           what) from None
        raise


def _lists(maps: list, name: str, kind: str, what: str, kindless_missing: bool = True) -> tuple:
    """Each record's value container for feature ``name`` (None where missing), type-checked; and each
    record's Feature (None where there is none), for ``_assemble``'s ``sources``.

    Two passes of C calls over the records (the map lookup, the value attribute) instead of a loop body per
    record. A feature of another kind reads as an empty container of the requested kind, so only records
    with no values need their kind checked. A Feature with no list at all (``tf.train.Feature()``) is a
    missing feature, as in TF's ``parse_example``; in a SequenceExample's context TF reads it as present
    with no values (``kindless_missing=False``)."""
    feats = [fmap.get(name) for fmap in maps]
    get = _VALUES[kind]
    if None not in feats:
        values = list(map(get, feats))
    else:
        values = [None if f is None else get(f) for f in feats]
    for i in [i for i, v in enumerate(values) if v is not None and not v]:
        which = feats[i].WhichOneof("kind")
        if which is None:
            values[i] = None if kindless_missing else ()  # a Feature with no list at all
        elif which != kind:
            raise InvalidArgumentError(f"{what}: feature '{name}' of record {i} holds {which}, but the spec asks "
                                       f"for {kind}.", what)
    return values, feats


_VALUES = {k: operator.attrgetter(f"{k}.value") for k in ("int64_list", "float_list", "bytes_list")}


def _assemble(chunks: list, total: int, dtype: np.dtype, sources: list = None) -> np.ndarray:
    """The values of ``chunks`` (a list of value containers or lists) in one array. ``sources``: for each
    chunk the Feature (or the list of Features, a record's steps) whose float lists it holds -- a chunk whose
    Feature is None or holds no float list is a default -- used only when floats hold a NaN."""
    if dtype == object:
        out = np.empty(total, dtype=object)
        out[:] = list(_chain(chunks))
        return out
    out = np.fromiter(_chain(chunks), dtype=dtype, count=total)
    if sources is not None and dtype == np.float32 and np.isnan(out).any():
        out = _exact_floats(out, chunks, sources)
    return out


def _exact_floats(values: np.ndarray, chunks: list, sources: list) -> np.ndarray:
    """``values`` with each NaN's exact bits. protobuf hands float_list values out as Python floats, and the
    float32 -> double conversion sets a signalling NaN's quiet bit (0x7fa00001 comes back as 0x7fe00001);
    the messages keep the bits, so read them from the serialized float lists. Only when a NaN is present,
    and only if the result is the same values (NaNs at the same places)."""
    parts = []
    for chunk, src in zip(chunks, sources):
        if type(src) is list:  # a record's feature-list steps
            parts.extend(_float_bits(f) for f in src)
        elif src is None or src.WhichOneof("kind") != "float_list":
            parts.append(np.asarray(chunk, dtype=np.float32).reshape(-1))  # a default (or a padding's nothing)
        else:
            parts.append(_float_bits(src))
    exact = np.concatenate(parts) if parts else np.empty(0, np.float32)
    if exact.shape == values.shape and np.array_equal(exact, values, equal_nan=True):
        return exact
    return values


def _float_bits(feature) -> np.ndarray:
    data = feature.float_list.SerializeToString()  # packed: tag 0x0a, a varint length, little-endian floats
    if not data:
        return np.empty(0, np.float32)
    i = 1
    while data[i] & 0x80:
        i += 1
    return np.frombuffer(data, dtype="<f4", offset=i + 1).astype(np.float32)


def _default_values(spec, name: str, size: int, what: str) -> list:
    """``spec.default_value`` as a flat list of ``size`` values of the spec's dtype, checked as TF checks it at
    every parse (whether or not a record needs it): converted to the dtype -- a value that would change
    (1.5 or "x" for an int64 feature, 5 for a string one, an int64 out of range) is refused -- and then
    reshaped, so the number of values must be ``size`` (a scalar is not broadcast)."""
    value = spec.default_value
    try:
        arr = np.asarray(value, dtype=object if spec.dtype == object else None)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{what}: default of feature '{name}' is not a rectangular array: {e}") from None
    flat = arr.reshape(-1).tolist()
    if not flat:
        pass  # no values to convert: only the size check below
    elif spec.dtype == object:
        for j, v in enumerate(flat):
            if isinstance(v, str):
                flat[j] = v.encode("utf-8")
            elif not isinstance(v, bytes):
                raise _default_error(TypeError if not isinstance(v, (list, tuple, np.ndarray)) else ValueError,
                                     what, name, value, "string")
    elif spec.dtype == np.int64:
        if arr.dtype.kind == "f" and isinstance(value, (np.ndarray, np.generic)) and np.isfinite(arr).all() \
                and (arr == np.trunc(arr)).all() and (np.abs(arr) < 2.0 ** 63).all():
            flat = arr.astype(np.int64).reshape(-1).tolist()  # integral numpy floats, as TF takes them
        elif arr.dtype.kind not in "biuO" or not all(isinstance(v, (int, np.integer)) for v in flat):
            raise _default_error(TypeError, what, name, value, "int64")
        flat = [int(v) for v in flat]
        if any(not -2 ** 63 <= v < 2 ** 63 for v in flat):
            raise ValueError(f"{what}: default of feature '{name}' ({_describe(value)}) is out of the int64 range.")
    else:
        if arr.dtype.kind not in "biufO" or not all(
                isinstance(v, (int, float, np.integer, np.floating)) for v in flat):
            raise _default_error(TypeError, what, name, value, "float32")
        try:
            with np.errstate(over="ignore"):  # beyond float32's range is inf, as in TF
                flat = np.array(flat, dtype=np.float64).astype(np.float32).tolist()  # rounded as TF rounds it
        except OverflowError:
            raise ValueError(f"{what}: default of feature '{name}' ({_describe(value)}) is out of the float "
                             "range.") from None
    if len(flat) != size:
        raise InvalidArgumentError(f"{what}: default of feature '{name}' has {len(flat)} values, but shape "
                                   f"{list(spec.shape) if isinstance(spec, FixedLenFeature) else []} needs {size} "
                                   "(TensorFlow: \"Input to reshape is a tensor with "
                                   f"{len(flat)} values, but the requested shape has {size}\").", what)
    return flat


def _default_error(cls, what, name, value, dtype):
    return cls(f"{what}: default of feature '{name}' ({_describe(value)}) cannot be converted to {dtype} "
               "without changing it.")


def _unsupported(spec, name: str, what: str) -> ValueError:
    return ValueError(f"{what}: unsupported {type(spec).__name__} {spec!r} for key '{name}'.")


def _check_specs(features: dict, what: str, context: bool = False) -> dict:
    """Each spec's default (FixedLenFeature: a flat list, or None when required) or padding value
    (FixedLenSequenceFeature), checked as TF checks the specs before it reads a record: spec errors do not
    depend on the data."""
    prepared = {}
    for name, spec in features.items():
        if isinstance(spec, FixedLenFeature):
            size = math.prod(spec.shape)
            default = None if spec.default_value is None else _default_values(spec, name, size, what)
            prepared[name] = default if default else None  # an empty default is no default in TF
        elif isinstance(spec, VarLenFeature):
            prepared[name] = None
        elif isinstance(spec, FixedLenSequenceFeature) and not context:
            if not spec.allow_missing:
                raise ValueError(f"{what}: feature '{name}': Unsupported: FixedLenSequenceFeature requires "
                                 "allow_missing to be True.")
            prepared[name] = (_pad_value(spec) if spec.default_value is None
                              else _default_values(spec, name, 1, what)[0])
        else:
            raise _unsupported(spec, name, what)
    return prepared


def _pad_value(spec):
    return b"" if spec.dtype == object else 0


def parse_features(maps: list, features: dict, what: str, prepared: dict = None, context: bool = False) -> dict:
    """Parse every feature of ``features`` over ``maps`` (one feature map per record); ``prepared`` is
    ``_check_specs(features, what, context)`` (computed here when not given). ``context``: the maps are a
    SequenceExample's contexts."""
    if prepared is None:
        prepared = _check_specs(features, what, context)
    n = len(maps)
    out = {}
    for name, spec in features.items():
        kind = _KIND[spec.dtype]
        lists, sources = _lists(maps, name, kind, what, kindless_missing=not context)
        if isinstance(spec, FixedLenFeature):
            size = math.prod(spec.shape)
            default = prepared[name]
            for i, values in enumerate(lists):
                if values is None:
                    if default is None:
                        raise InvalidArgumentError(f"{what}: feature '{name}' is required but missing in record "
                                                   f"{i}.", what)
                    lists[i] = default
            lengths = np.fromiter(map(len, lists), dtype=np.int64, count=n)
            if n and not (lengths == size).all():
                i = int(np.argmax(lengths != size))
                raise InvalidArgumentError(f"{what}: feature '{name}' of record {i} has {lengths[i]} values; "
                                           f"FixedLenFeature shape {list(spec.shape)} needs {size}.", what)
            out[name] = _assemble(lists, n * size, spec.dtype, sources).reshape((n,) + spec.shape)
        elif isinstance(spec, VarLenFeature):
            lists = [() if v is None else v for v in lists]
            lengths = np.fromiter(map(len, lists), dtype=np.int64, count=n)
            splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            out[name] = VarLenValue(_assemble(lists, int(splits[-1]), spec.dtype, sources), splits)
        else:  # FixedLenSequenceFeature (allow_missing; _check_specs refuses the rest)
            lists = [() if v is None else v for v in lists]
            out[name] = _padded_rows(lists, spec, name, what, "record", prepared[name], sources)[0]
    return out


def _padded_rows(lists, spec, name, what, unit, pad, sources=None):
    """Records holding k * prod(shape) values each -> (n, max_k) + shape, padded; and each k."""
    n = len(lists)
    size = max(math.prod(spec.shape), 1)
    lengths = np.fromiter(map(len, lists), dtype=np.int64, count=n)
    if n and (lengths % size).any():
        i = int(np.argmax(lengths % size != 0))
        raise InvalidArgumentError(f"{what}: feature '{name}' of {unit} {i} has {lengths[i]} values, not a "
                                   f"multiple of shape {list(spec.shape)}.", what)
    rows = lengths // size
    width = int(rows.max()) if n else 0
    values = _assemble(lists, int(lengths.sum()), spec.dtype, sources)
    out = np.empty((n, width * size), dtype=spec.dtype)
    out[...] = pad
    mask = np.arange(width * size)[None, :] < lengths[:, None]
    out[mask] = values
    return out.reshape((n, width) + spec.shape), rows


def parse_example(serialized, features: dict, name=None, example_names=None) -> dict:
    """``tf.io.parse_example``: a 1-D batch of serialized ``Example`` records -> a dict of numpy values."""
    what = "parse_example"
    prepared = _check_specs(features, what)  # spec errors first, whatever the records hold (as TF)
    records = _records(serialized, what)
    maps = [m.features.feature for m in _decode(Example, records, what)]
    return parse_features(maps, features, what, prepared)


def parse_single_example(serialized, features: dict, name=None, example_names=None) -> dict:
    """``tf.io.parse_single_example``: one record; no batch dimension (VarLen gives its values array)."""
    batch = parse_example([_single(serialized, "parse_single_example")], features)
    return {k: (v.values if isinstance(v, VarLenValue) else v[0]) for k, v in batch.items()}


def parse_sequence_example(serialized, context_features=None, sequence_features=None, example_names=None,
                           name=None):
    """``tf.io.parse_sequence_example``: ``(context, feature_lists, lengths)`` for a batch of records.

    Sequence features: ``FixedLenSequenceFeature`` -> ``(batch, max_steps) + shape`` padded with its default
    (0 / b""); ``VarLenFeature`` -> ``VarLenValue`` over all steps of all records in order (record i's
    steps are ``lengths[name][i]`` consecutive rows)."""
    what = "parse_sequence_example"
    prepared = _check_specs(context_features or {}, what, context=True)
    for fname, spec in (sequence_features or {}).items():  # TF's checks, before it reads a record
        if isinstance(spec, FixedLenSequenceFeature):
            if spec.default_value is not None:
                raise ValueError(f"{what}: Value feature_list.dense_defaults[{fname}] must be None (a "
                                 "FixedLenSequenceFeature in sequence_features takes no default_value; missing "
                                 "steps are padded with 0 / b\"\").")
        elif not isinstance(spec, VarLenFeature):
            raise _unsupported(spec, fname, what)
    msgs = _decode(SequenceExample, _records(serialized, what), what)
    context = parse_features([m.context.feature for m in msgs], context_features or {}, what, prepared, context=True)
    sequences, lengths = {}, {}
    for fname, spec in (sequence_features or {}).items():
        kind = _KIND[spec.dtype]
        steps_per_record, step_features = [], []
        for i, m in enumerate(msgs):
            lists = m.feature_lists.feature_list
            if fname not in lists:
                if isinstance(spec, FixedLenSequenceFeature) and not spec.allow_missing:
                    raise InvalidArgumentError(f"{what}: feature list '{fname}' is required but missing in "
                                               f"record {i}.", what)
                steps_per_record.append([])
                step_features.append([])
                continue
            steps = list(lists[fname].feature)
            steps_per_record.append(_step_values(steps, fname, kind, what, i))
            step_features.append(steps)
        counts = np.array([len(s) for s in steps_per_record], dtype=np.int64)
        lengths[fname] = counts
        flat_steps = list(_chain(steps_per_record))
        if isinstance(spec, FixedLenSequenceFeature):
            size = math.prod(spec.shape)
            step_lengths = np.fromiter(map(len, flat_steps), dtype=np.int64, count=len(flat_steps))
            if len(flat_steps) and not (step_lengths == size).all():
                j = int(np.argmax(step_lengths != size))
                i = int(np.searchsorted(np.cumsum(counts), j, side="right"))
                raise InvalidArgumentError(f"{what}: a step of feature list '{fname}' in record {i} has "
                                           f"{step_lengths[j]} values; shape {list(spec.shape)} needs {size}.", what)
            per_record = [list(_chain(s)) for s in steps_per_record]
            sequences[fname] = _padded_rows(per_record, spec, fname, what, "record", _pad_value(spec),
                                            step_features)[0]
        elif isinstance(spec, VarLenFeature):
            step_lengths = np.fromiter(map(len, flat_steps), dtype=np.int64, count=len(flat_steps))
            splits = np.concatenate([[0], np.cumsum(step_lengths)]).astype(np.int64)
            sources = list(_chain(step_features)) if spec.dtype == np.float32 else None
            sequences[fname] = VarLenValue(_assemble(flat_steps, int(splits[-1]), spec.dtype, sources), splits)
    return context, sequences, lengths


def _step_values(steps: list, name: str, kind: str, what: str, record: int) -> list:
    """The value containers of one record's feature-list steps (as ``_lists`` does for features)."""
    values = list(map(_VALUES[kind], steps))
    for j in [j for j, v in enumerate(values) if not v]:
        which = steps[j].WhichOneof("kind")
        if which is None:
            values[j] = ()
        elif which != kind:
            raise InvalidArgumentError(f"{what}: step {j} of feature list '{name}' in record {record} holds "
                                       f"{which}, but the spec asks for {kind}.", what)
    return values


def parse_single_sequence_example(serialized, context_features=None, sequence_features=None,
                                  example_name=None, name=None):
    """``tf.io.parse_single_sequence_example``: ``(context, feature_lists)`` of one record, unbatched."""
    record = _single(serialized, "parse_single_sequence_example")
    context, sequences, lengths = parse_sequence_example([record], context_features, sequence_features)
    context = {k: (v.values if isinstance(v, VarLenValue) else v[0]) for k, v in context.items()}
    sequences = {k: (v if isinstance(v, VarLenValue) else v[0]) for k, v in sequences.items()}
    return context, sequences
