"""Nested element structures and their specs -- the one place that knows how nests are walked.

An element is a nest of tuples (namedtuples stay namedtuples), dicts (and other mappings) and leaves,
with tf.nest's rules (see the "nest" section): a dict's values are flattened in SORTED key order and
packing keeps each dict's own key order, so dicts always match by key. Leaves are numpy arrays or numpy
scalars; strings are always ``bytes`` (object arrays of bytes when batched), as ``tf.data``'s
``as_numpy_iterator`` returns them, whether they came from ``str``, numpy ``U``/``S`` arrays or object
arrays of ``str``.

Value conversion follows TensorFlow so ported pipelines keep their dtypes (a documented choice, see
README "Differences from tf.data"): Python ``int`` becomes int32 when it fits (else int64), ``float``
becomes float32, ``bool`` bool, ``str``/``bytes`` bytes; numpy values keep their dtype. A Python list in
*input data* is one array, not a structure; a list *returned by a user function* becomes a tuple at the
top level and an array inside (``normalize``).
"""

from __future__ import annotations

import collections
import collections.abc
import numbers
import operator
from typing import Any, Callable, Iterable, Sequence

import numpy as np

STRING = np.dtype(object)  # dtype of string leaves: Python ``bytes`` in object arrays
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


# ----------------------------------------------------------------------------------------------- specs
class TensorSpec:
    """Static description of a leaf: ``shape`` (``None`` entries are unknown dims; ``shape=None`` is an
    unknown rank) and a numpy ``dtype`` (``STRING`` for bytes)."""

    __slots__ = ("shape", "dtype", "name")

    def __init__(self, shape, dtype, name: str | None = None):
        self.shape = None if shape is None else tuple(None if d is None else int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.name = name

    @property
    def rank(self):
        return None if self.shape is None else len(self.shape)

    def is_compatible_with(self, value) -> bool:
        arr = value if isinstance(value, (np.ndarray, np.generic)) else np.asarray(value)
        if not dtypes_compatible(self.dtype, arr.dtype):
            return False
        return shape_compatible(self.shape, arr.shape)

    def most_specific_compatible(self, other: "TensorSpec") -> "TensorSpec":
        if self.shape is None or other.shape is None or len(self.shape) != len(other.shape):
            shape = None
        else:
            shape = tuple(a if a == b else None for a, b in zip(self.shape, other.shape))
        return type(self)(shape, self.dtype) if type(other) is type(self) else TensorSpec(shape, self.dtype)

    def with_leading(self, dim) -> "TensorSpec":
        """The spec of a batch of such leaves (``dim`` is the batch size, or ``None``)."""
        return TensorSpec(None if self.shape is None else (dim,) + self.shape, self.dtype)

    def unbatched(self) -> "TensorSpec":
        return TensorSpec(None if self.shape is None else self.shape[1:], self.dtype)

    def __eq__(self, other):
        return isinstance(other, TensorSpec) and self.shape == other.shape and self.dtype == other.dtype

    def __hash__(self):
        return hash((self.shape, self.dtype))

    def __repr__(self):
        shape = "<unknown>" if self.shape is None else self.shape
        return f"TensorSpec(shape={shape}, dtype={dtype_name(self.dtype)})"


class DatasetSpec:
    """Spec of a leaf that is itself a Dataset (the windows of ``window``)."""

    __slots__ = ("element_spec",)

    def __init__(self, element_spec):
        self.element_spec = element_spec

    def __eq__(self, other):
        return isinstance(other, DatasetSpec) and other.element_spec == self.element_spec

    def __hash__(self):
        return hash(repr(self))

    def __repr__(self):
        return f"DatasetSpec({self.element_spec!r})"


def dtype_name(dtype) -> str:
    return "string" if np.dtype(dtype) == STRING else np.dtype(dtype).name


def dtypes_compatible(a, b) -> bool:
    a, b = np.dtype(a), np.dtype(b)
    if a == b:
        return True
    # bytes may arrive as fixed-width numpy strings; they are strings all the same
    return a == STRING and b.kind in "SUO"


def shape_compatible(spec_shape, shape) -> bool:
    if spec_shape is None:
        return True
    if len(spec_shape) != len(shape):
        return False
    return all(s is None or s == d for s, d in zip(spec_shape, shape))


# ------------------------------------------------------------------------------------------------- nest
# tf.nest's rules (tf.data's modality), which every node, the checkpoint and cache formats and distribute
# follow through the functions below -- never by walking tuples or dicts themselves:
# - nests are tuples (namedtuples: same name and fields make the same type), dicts and any other
#   ``collections.abc.Mapping`` (OrderedDict, defaultdict, ...), and attrs-decorated classes;
#   a Python list is a leaf (input data: one array; function results: see ``normalize``);
# - a mapping's values are taken in SORTED key order (TypeError "nest only supports dicts with sortable
#   keys." otherwise), so two dicts match by key whatever order their keys were inserted in;
# - packing leaves into a mapping keeps the target's own key order and type; attrs classes take their
#   fields in ``__attrs_attrs__`` order and are rebuilt by ``cls(*values)``.
_LEAF, _TUPLE, _NAMEDTUPLE, _TUPLE_SUBCLASS, _DICT, _MAPPING, _ATTRS = range(1, 8)  # 0 is never a kind
_kinds: dict = {}  # type -> kind: one dict lookup per node of a nest, no isinstance chain (flatten is per element)
_MEMO_LIMIT = 4096  # entries of _kinds and _key_orders


def _classify(t) -> int:
    if issubclass(t, tuple):
        fields = getattr(t, "_fields", None)
        if isinstance(fields, collections.abc.Sequence) and all(isinstance(f, str) for f in fields):
            return _NAMEDTUPLE
        return _TUPLE if t is tuple else _TUPLE_SUBCLASS
    if t is dict:
        return _DICT
    if issubclass(t, collections.abc.Mapping):
        return _MAPPING
    if hasattr(t, "__attrs_attrs__"):
        return _ATTRS
    return _LEAF


def _kind(x) -> int:
    t = type(x)
    k = _kinds.get(t)
    if k is None:
        k = _classify(t)
        if len(_kinds) < _MEMO_LIMIT:  # classes made per call (namedtuple factories) must not pile up
            _kinds[t] = k
    return k


for _t in (np.ndarray, bytes, str, int, float, bool, list, type(None), np.int32, np.int64, np.float32, np.float64):
    _kinds[_t] = _LEAF
_kinds[tuple], _kinds[dict] = _TUPLE, _DICT

_key_orders: dict = {}  # a mapping's keys in insertion order -> its key-order tuple (see _key_order)


def _tuple_getter(items) -> Callable:
    """``operator.itemgetter`` that always returns a tuple (also for one item or none)."""
    if len(items) == 1:
        only = items[0]
        return lambda m: (m[only],)
    if not items:
        return lambda m: ()
    return operator.itemgetter(*items)


def _key_order(mapping) -> tuple:
    """``(sorted keys, already sorted?, mapping -> values by sorted key, insertion-order keys,
    values by sorted key -> values in insertion order)``, memoised per key tuple: a pipeline's elements
    share a few key sets, and C getters cost less than sorting and indexing per element."""
    keys = tuple(mapping)
    try:
        hit = _key_orders.get(keys)
    except TypeError:  # unhashable keys cannot be a dict's, but a Mapping's iteration could yield anything
        hit = None
    if hit is None:
        try:
            ordered = tuple(sorted(keys))
        except TypeError:
            raise TypeError(f"nest only supports dicts with sortable keys; got keys {list(keys)!r:.200}") from None
        position = {k: i for i, k in enumerate(ordered)}
        hit = (ordered, ordered == keys, _tuple_getter(ordered), keys,
               _tuple_getter([position[k] for k in keys]))
        if len(_key_orders) >= _MEMO_LIMIT:  # many distinct key sets (ids as keys): keep the memo small
            _key_orders.clear()
        try:
            _key_orders[keys] = hit
        except TypeError:
            pass
    return hit


def _sorted_keys(mapping) -> tuple:
    return _key_order(mapping)[:2]


def sorted_keys(mapping) -> tuple:
    """A mapping's keys in the order its values are flattened (sorted, as tf.nest)."""
    return _key_order(mapping)[0]


def _attrs_names(t) -> tuple:
    return tuple(a.name for a in t.__attrs_attrs__)


def is_namedtuple(x) -> bool:
    return _kind(x) == _NAMEDTUPLE


def is_mapping(x) -> bool:
    k = _kind(x)
    return k == _DICT or k == _MAPPING


def is_nested(x) -> bool:
    return _kind(x) != _LEAF


def children(structure) -> list:
    """The direct sub-structures of a nest node in flatten order (``[]`` for a leaf)."""
    k = _kind(structure)
    if k == _LEAF:
        return []
    if k == _DICT or k == _MAPPING:
        return list(_key_order(structure)[2](structure))
    if k == _ATTRS:
        return [getattr(structure, n) for n in _attrs_names(type(structure))]
    return list(structure)


def flatten(structure) -> list:
    """The leaves in tf.nest's order: tuple positions, mapping values by sorted key, attrs fields."""
    kinds = _kinds
    t = type(structure)
    if t is tuple or t is dict:  # the common elements: a flat tuple or dict of arrays
        items = structure if t is tuple else _key_order(structure)[2](structure)
        for x in items:
            if kinds.get(type(x)) != _LEAF:
                break
        else:
            return list(items)
        out: list = []
        _flatten_items(items, out)
        return out
    if kinds.get(t) == _LEAF:
        return [structure]
    out = []
    _flatten_into(structure, out)
    return out


def _flatten_into(s, out):
    k = _kinds.get(type(s)) or _kind(s)
    if k == _LEAF:
        out.append(s)
    elif k == _DICT or k == _MAPPING:
        _flatten_items(_key_order(s)[2](s), out)
    elif k == _ATTRS:
        _flatten_items([getattr(s, n) for n in _attrs_names(type(s))], out)
    else:
        _flatten_items(s, out)


def _flatten_items(items, out):
    kinds = _kinds
    for x in items:  # leaves inline: a call per leaf would double the cost of a flat dict
        if kinds.get(type(x)) == _LEAF:
            out.append(x)
        else:
            _flatten_into(x, out)


def pack_as(structure, leaves: Sequence):
    """Rebuild ``structure``'s nest with ``leaves`` in ``flatten`` order (a mapping keeps its own key order
    and type). ValueError when the number of leaves differs."""
    if type(leaves) is not list and type(leaves) is not tuple:
        leaves = list(leaves)
    kinds = _kinds
    t = type(structure)
    if kinds.get(t) == _LEAF and len(leaves) == 1:
        return leaves[0]
    if (t is tuple or t is dict) and len(leaves) == len(structure):  # flat tuples and dicts: no walk
        order = _key_order(structure) if t is dict else None
        for x in (structure if order is None else order[2](structure)):
            if kinds.get(type(x)) != _LEAF:
                break
        else:
            if order is None:
                return tuple(leaves)
            # the instance's own keys (the memo's may be equal keys of another type: 1 and 1.0)
            return dict(zip(structure, leaves if order[1] else order[4](leaves)))
    it = iter(leaves)
    try:
        result = _pack(structure, it)
    except StopIteration:
        raise ValueError(f"pack_as: fewer leaves than the structure {describe(structure)} holds.") from None
    if next(it, _END) is not _END:
        raise ValueError(f"pack_as: more leaves than the structure {describe(structure)} holds.")
    return result


_END = object()


def _pack(s, it):
    kinds = _kinds
    k = kinds.get(type(s)) or _kind(s)
    if k == _LEAF:
        return next(it)
    # leaves inline (no call per leaf); StopIteration from next() reaches pack_as, which reports it
    if k == _TUPLE:
        return tuple([next(it) if kinds.get(type(x)) == _LEAF else _pack(x, it) for x in s])
    if k == _DICT or k == _MAPPING:
        _, in_order, by_key, _, to_insertion = _key_order(s)
        values = [next(it) if kinds.get(type(x)) == _LEAF else _pack(x, it) for x in by_key(s)]
        items = zip(s, values if in_order else to_insertion(values))
        return dict(items) if k == _DICT else rebuild_mapping(s, list(items))
    if k == _ATTRS:
        return type(s)(*[_pack(getattr(s, n), it) for n in _attrs_names(type(s))])
    items = [_pack(x, it) for x in s]
    return type(s)(*items) if k == _NAMEDTUPLE else type(s)(items)


def pack_as_inserted(structure, leaves: Sequence):
    """``pack_as`` for leaves listed with each dict's values in its INSERTION order -- the order jaxfeed
    flattened in before it followed tf.nest. Only for reading files written then (checkpoint states
    without the ``"order": "sorted"`` marker); everything else uses ``pack_as``."""
    it = iter(leaves)

    def pack(s):
        k = _kind(s)
        if k == _LEAF:
            return next(it)
        if k == _DICT or k == _MAPPING:
            return rebuild_mapping(s, [(key, pack(x)) for key, x in s.items()])
        return _rebuild(s, k, [pack(x) for x in children(s)])

    return pack(structure)


def rebuild_mapping(like, items):
    """A mapping of ``like``'s type holding ``items`` (key, value pairs), as tf.nest rebuilds one: a
    defaultdict keeps its factory; a mutable mapping is filled key by key; others get the pairs."""
    t = type(like)
    if t is dict:
        return dict(items)
    if isinstance(like, collections.defaultdict):
        out = collections.defaultdict(like.default_factory)
        out.update(items)
        return out
    if isinstance(like, collections.abc.MutableMapping):
        try:
            out = t()
        except TypeError:
            return t(items)
        for key, value in items:
            out[key] = value
        return out
    try:
        return t(items)
    except TypeError as e:
        raise TypeError(f"Cannot rebuild a {t.__name__} mapping from key-value pairs: {e}") from None


def map_structure(fn: Callable, structure, *others):
    """Apply ``fn`` leaf by leaf over one or more structures of the same nest (matched by dict key)."""
    if others:
        for o in others:
            assert_same_structure(structure, o)
        leaves = [flatten(s) for s in (structure,) + others]
        return pack_as(structure, [fn(*xs) for xs in zip(*leaves)])
    return pack_as(structure, [fn(x) for x in flatten(structure)])


def read_only(leaf):
    """``leaf``, or where it is a writable array a view of it that cannot be written through (the array itself
    is left as it is: it may be the user's). Elements that jaxfeed hands out and keeps -- views of
    ``from_tensor_slices``'s arrays, a cache's recording -- are such views: a function that wrote into one in
    place changed the source, and every later epoch saw the change."""
    if type(leaf) is np.ndarray and leaf.flags.writeable:
        leaf = leaf.view()
        leaf.flags.writeable = False
    return leaf


def read_only_element(element):
    """``element`` with each array leaf ``read_only`` (a plain array: without walking a structure)."""
    if type(element) is np.ndarray:
        return read_only(element)
    if _kind(element) == _LEAF:
        return element
    return pack_as(element, [read_only(x) for x in flatten(element)])


def same_key_order(a, b) -> bool:
    """Every mapping of ``a`` lists its keys in the order of ``b``'s mapping at the same place (values
    and leaves are not compared)."""
    k = _kind(a)
    if k == _LEAF:
        return True
    if k == _DICT or k == _MAPPING:
        if not is_mapping(b) or tuple(a) != tuple(b):
            return False
    elif _kind(b) != k:
        return False
    return all(same_key_order(x, y) for x, y in zip(children(a), children(b)))


def _holds_mapping(s) -> bool:
    k = _kind(s)
    return k == _DICT or k == _MAPPING or (k != _LEAF and any(_holds_mapping(x) for x in children(s)))


def spec_key_order(spec):
    """None when ``spec`` holds no mapping; else ``element -> element`` giving every mapping the key order
    of ``spec``'s (values by key), as tf.data packs each element by its dataset's spec: the elements of a
    concatenate or choose_from_datasets come out in one key order whichever input they came from. An
    element already in that order, or of another structure (left to the checks downstream), is returned
    as it is."""
    if not _holds_mapping(spec):
        return None
    if type(spec) is dict and all(_kind(x) == _LEAF for x in spec.values()):
        keys = tuple(spec)

        def flat_dict(element):
            if type(element) is dict and tuple(element) == keys:
                return element
            return pack_as(spec, flatten(element)) if same_structure(element, spec) else element

        return flat_dict

    def nested(element):
        if same_key_order(element, spec) or not same_structure(element, spec):
            return element
        return pack_as(spec, flatten(element))

    return nested


def flatten_up_to(shallow, value, what: str = "value") -> list:
    """``value``'s sub-structures at the leaf positions of ``shallow`` (a spec or an element), in
    ``flatten`` order: per-component arguments such as ``padded_shapes``. TypeError naming the place
    where ``value`` does not follow ``shallow``'s nest."""
    out: list = []
    _up_to(shallow, value, "", out, what, shallow)
    return out


def _up_to(t, v, path, out, what, top):
    k = _kind(t)
    if k == _LEAF:
        out.append(v)
        return
    vk = _kind(v)
    problem = None
    if k == _DICT or k == _MAPPING:
        if vk != _DICT and vk != _MAPPING:
            problem = f"expected a dict, got {type(v).__name__}"
        elif set(v) != set(t):
            problem = f"expected keys {sorted_keys(t)!r}, got {list(v)!r}"
        else:
            for key in _sorted_keys(t)[0]:
                _up_to(t[key], v[key], f"{path}[{key!r}]", out, what, top)
            return
    elif k == _ATTRS:
        if type(v) is not type(t):
            problem = f"expected a {type(t).__name__}, got {type(v).__name__}"
        else:
            for n in _attrs_names(type(t)):
                _up_to(getattr(t, n), getattr(v, n), f"{path}.{n}", out, what, top)
            return
    else:
        if vk not in (_TUPLE, _NAMEDTUPLE, _TUPLE_SUBCLASS) or len(v) != len(t):
            problem = f"expected a tuple of {len(t)}, got {v!r:.80}"
        else:
            for i, (a, b) in enumerate(zip(t, v)):
                _up_to(a, b, f"{path}[{i}]", out, what, top)
            return
    raise TypeError(f"`{what}` must match the element structure {describe(top)}; at {path or 'the top'} "
                    f"{problem}.")


def _same_type(a, b, k) -> bool:
    if k == _NAMEDTUPLE:  # as tf.nest: namedtuples with the same name and fields are one type
        ta, tb = type(a), type(b)
        return ta is tb or (ta.__name__ == tb.__name__ and tuple(ta._fields) == tuple(tb._fields))
    if k == _DICT or k == _MAPPING:
        return True  # two mapping types compare equal (tf.nest): dict and OrderedDict match
    return type(a) is type(b)


def same_structure(a, b) -> bool:
    """The same nest: tuple lengths and types (namedtuples by name and fields), mapping key SETS (any two
    mapping types match, as in tf.nest), attrs classes; leaves anywhere."""
    ka, kb = _kind(a), _kind(b)
    a_map, b_map = ka == _DICT or ka == _MAPPING, kb == _DICT or kb == _MAPPING
    if a_map or b_map:
        if not (a_map and b_map and a.keys() == b.keys()):
            return False
        pairs = ((a[key], b[key]) for key in a)
    elif ka != kb:
        return False
    elif ka == _LEAF:
        return True
    elif not _same_type(a, b, ka):
        return False
    else:
        ca, cb = children(a), children(b)
        if len(ca) != len(cb):
            return False
        pairs = zip(ca, cb)
    kinds = _kinds
    for x, y in pairs:  # leaf pairs inline: stack() checks every element of a batch
        if kinds.get(type(x)) == _LEAF and kinds.get(type(y)) == _LEAF:
            continue
        if not same_structure(x, y):
            return False
    return True


def assert_same_structure(a, b, what: str = "structures"):
    if not same_structure(a, b):
        raise TypeError(f"The two {what} don't have the same nested structure: {describe(a)} vs {describe(b)}")


def describe(structure) -> str:
    """A short nest sketch for messages: ``(., {'a': .})`` (dicts in their own key order)."""
    k = _kind(structure)
    if k == _LEAF:
        return "."
    if k == _DICT or k == _MAPPING:
        inner = "{" + ", ".join(f"{key!r}: {describe(v)}" for key, v in structure.items()) + "}"
        return inner if k == _DICT else f"{type(structure).__name__}({inner})"
    if k == _ATTRS:
        names = _attrs_names(type(structure))
        return f"{type(structure).__name__}(" + ", ".join(f"{n}={describe(getattr(structure, n))}"
                                                           for n in names) + ")"
    inner = ", ".join(describe(x) for x in structure)
    return f"({inner})" if k == _TUPLE else f"{type(structure).__name__}({inner})"


# ------------------------------------------------------------------------------------------ conversion
def to_array(value, what: str = "value") -> np.ndarray | np.generic:
    """Convert one leaf the way TensorFlow converts Python values (see the module docstring)."""
    if isinstance(value, (np.ndarray, np.generic)):
        kind = value.dtype.kind
        if kind in "SU":
            return _strings_to_object(value)
        if kind == "O" and isinstance(value, np.ndarray):
            return strings_as_bytes(value)
        return value
    if isinstance(value, bool):
        return np.bool_(value)
    if isinstance(value, numbers.Integral):
        v = int(value)
        if _INT32_MIN <= v <= _INT32_MAX:
            return np.int32(v)
        _check_int64(v, what)
        return np.int64(v)
    if isinstance(value, numbers.Real):
        return np.float32(value)
    if isinstance(value, (bytes, str)):
        return value.encode() if isinstance(value, str) else value
    if isinstance(value, (list,)) or (hasattr(value, "__array__") and not isinstance(value, (tuple, dict))):
        return _list_to_array(value, what)
    if value is None:
        raise ValueError(f"Cannot convert None {what} to an array.")
    raise TypeError(f"Cannot convert {what} of type {type(value).__name__} to an array: {value!r:.80}")


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _check_int64(v: int, what: str) -> None:
    if not _INT64_MIN <= v <= _INT64_MAX:  # numpy would raise OverflowError; TF raises ValueError
        raise ValueError(f"Can't convert Python sequence with out-of-range integer {v} to an array ({what}).")


def _strings_to_object(arr):
    out = np.empty(arr.shape, dtype=object)
    flat = arr.reshape(-1)
    out.reshape(-1)[:] = [s.encode() if isinstance(s, str) else bytes(s) for s in flat.tolist()]
    return out if arr.ndim else out[()]


def strings_as_bytes(arr: np.ndarray) -> np.ndarray:
    """An object array with its ``str`` items (and numpy string scalars) as UTF-8 ``bytes``: TF yields
    strings as bytes whatever they were made from. The array itself when it holds none (no copy)."""
    flat = arr.reshape(-1)
    types = set(map(type, flat))
    if types <= {bytes} or not (str in types or np.str_ in types or np.bytes_ in types):
        return arr
    out = np.empty(arr.shape, dtype=object)
    out.reshape(-1)[:] = [x.encode() if isinstance(x, str) else bytes(x) if isinstance(x, bytes) else x
                          for x in flat.tolist()]
    return out


def _list_to_array(value, what):
    if not isinstance(value, list):
        arr = np.asarray(value)
        return _strings_to_object(arr) if arr.dtype.kind in "SU" else arr
    types = set(map(type, value))
    if types == {str} or types == {bytes}:  # a flat list of strings (text lines, file names): in C loops
        out = np.empty(len(value), dtype=object)
        out[:] = list(map(str.encode, value)) if str in types else value
        return out
    leaves = list(_iter_list_leaves(value))
    kinds = {_leaf_kind(x) for x in leaves}
    if "str" in kinds and len(kinds) > 1:
        raise ValueError(f"Can't convert {what}: a Python list mixes strings and numbers.")
    if "other" in kinds:
        odd = next(x for x in leaves if _leaf_kind(x) == "other")
        raise TypeError(f"Can't convert {what}: a Python list holds a {type(odd).__name__} ({odd!r:.60}); "
                        "lists in data and inner lists of function results become arrays of numbers or strings.")
    if "str" in kinds:
        dtype = STRING
    elif "float" in kinds:
        dtype = np.float32
    elif "int" in kinds:
        ints = [int(x) for x in leaves if _leaf_kind(x) == "int"]
        fits = all(_INT32_MIN <= v <= _INT32_MAX for v in ints)
        if not fits:
            for v in ints:
                _check_int64(v, what)
        dtype = np.int32 if fits else np.int64
    elif "bool" in kinds:
        dtype = np.bool_
    elif "numpy" in kinds:
        dtype = None
    else:
        dtype = np.float32  # an empty list, as TF makes it
    try:
        if dtype is STRING:
            arr = np.array(value, dtype=object)
            if arr.dtype != object or any(isinstance(x, list) for x in arr.reshape(-1)):
                raise ValueError
            flat = arr.reshape(-1)
            flat[:] = [s.encode() if isinstance(s, str) else s for s in flat]
            return arr
        return np.array(value, dtype=dtype)
    except ValueError:
        raise ValueError(f"Can't convert non-rectangular Python sequence to an array ({what}).") from None


def _iter_list_leaves(value):
    for x in value:
        if isinstance(x, (list, tuple)):  # inside a list, tuples are rows too (np.array's view)
            yield from _iter_list_leaves(x)
        else:
            yield x


def _leaf_kind(x):
    if isinstance(x, bool) or isinstance(x, np.bool_):
        return "bool"
    if isinstance(x, (str, bytes)):
        return "str"
    if isinstance(x, (np.ndarray, np.generic)):
        return "numpy"
    if isinstance(x, numbers.Integral):
        return "int"
    if isinstance(x, numbers.Real):
        return "float"
    return "other"


def normalize(value, what: str = "element"):
    """Convert the result of a user function into an element, as tf.data does: a TOP-LEVEL list becomes a
    tuple; an inner list is one array (``{"a": [x, x]}`` -> an int64[2] leaf); leaves become numpy values
    and strings ``bytes`` (``str``, numpy ``U`` arrays and object arrays of ``str`` alike)."""
    t = type(value)
    if t is np.ndarray and value.dtype.kind not in "OSU":  # the common result: one numeric array
        return value
    if t is list:
        return tuple([_normalize(x, what) for x in value])
    return _normalize(value, what)


def _normalize(value, what):
    t = type(value)
    if t in _PLAIN_SCALARS:
        return value
    if t is np.ndarray:
        return value if value.dtype.kind not in "OSU" else to_array(value, what)
    if t is tuple:
        return tuple([_normalize(x, what) for x in value])
    if t is dict:  # converted key by key: the dict keeps its own order, no sorting needed here
        return {key: _normalize(x, what) for key, x in value.items()}
    if isinstance(value, np.generic):  # numpy string scalars (and np.void, np.object_ items)
        return value if value.dtype.kind not in "SU" else to_array(value, what)
    k = _kinds.get(t) or _kind(value)
    if k == _LEAF:
        if value is None:
            raise InvalidArgumentErrorLazy(f"{what} is None; a function must return a value (not None).")
        if _is_dataset(value) or isinstance(value, _COMPOSITES):  # dataset-valued (as tf.data allows), ragged
            return value
        return to_array(value, what)
    return _rebuild(value, k, [_normalize(x, what) for x in children(value)])


# leaf types whose values are elements as they are (numpy's numeric and bool scalars, bytes): one set lookup
_PLAIN_SCALARS = frozenset([bytes] + [t for t in set(np.sctypeDict.values())
                                      if issubclass(t, np.generic) and np.dtype(t).kind in "biufcmM"])


def normalize_inner(value, what: str = "element"):
    """``normalize`` for a part of a function's result (a scan's new state, a reduce's accumulator): a list
    there is one array, not a tuple."""
    return _normalize(value, what)


def normalize_data(value, what: str = "input data"):
    """Convert *input data* (from_tensors/from_tensor_slices): a Python list is one array, not a nest."""
    k = _kind(value)
    if k == _LEAF:
        if value is None:
            raise ValueError(f"Cannot convert None {what} to an array.")
        if _is_dataset(value):
            return value
        return to_array(value, what)
    return _rebuild(value, k, [normalize_data(x, what) for x in children(value)])


def _rebuild(like, k, items: list):
    """A nest node of ``like``'s kind and type holding ``items`` (its converted children, flatten order)."""
    if k == _TUPLE:
        return tuple(items)
    if k == _DICT or k == _MAPPING:
        values = dict(zip(_sorted_keys(like)[0], items))
        return rebuild_mapping(like, [(key, values[key]) for key in like])
    if k == _NAMEDTUPLE or k == _ATTRS:
        return type(like)(*items)
    return type(like)(items)


def _is_dataset(value):
    return type(value).__name__ == "Dataset" or hasattr(value, "_node")


def InvalidArgumentErrorLazy(message):  # noqa: N802 - a constructor, deferred to avoid an import cycle
    from .errors import InvalidArgumentError

    return InvalidArgumentError(message)


def spec_of(value) -> Any:
    """The spec structure of one element."""
    return map_structure(_leaf_spec, value)


_COMPOSITES: tuple = ()  # leaf types that are not one array (ragged.RaggedValue, SparseValue): their own spec


def register_composite(cls) -> None:
    """A leaf type with a ``spec()`` of its own, passed through ``normalize`` as it is."""
    global _COMPOSITES
    if cls not in _COMPOSITES:
        _COMPOSITES = _COMPOSITES + (cls,)


def _leaf_spec(leaf):
    if _is_dataset(leaf):
        return DatasetSpec(leaf.element_spec)
    if isinstance(leaf, _COMPOSITES):
        return leaf.spec()
    arr = leaf if isinstance(leaf, (np.ndarray, np.generic)) else to_array(leaf)
    if isinstance(arr, bytes):
        return TensorSpec((), STRING)
    return TensorSpec(arr.shape, arr.dtype)


def leaf_specs(spec) -> list:
    return flatten(spec)


def concatenate(arrays: Sequence) -> np.ndarray:
    """``np.concatenate(arrays)`` keeping the dtype they share: numpy gives a non-native byte order (``>i4``)
    back in native order, where ``batch`` keeps it -- and ``np.dtype(">i4") != np.dtype("<i4")``."""
    dtype = getattr(arrays[0], "dtype", None)
    if dtype is not None and all(getattr(a, "dtype", None) == dtype for a in arrays):
        return np.concatenate(arrays, dtype=dtype)
    return np.concatenate(arrays)


def stack(elements: Sequence, spec=None, what: str = "batch"):
    """Stack elements (same nest) on a new leading dimension, leaf by leaf, into fresh arrays."""
    first = elements[0]
    if not is_nested(first):
        return _stack_leaf(elements, 0, what)
    for i, e in enumerate(elements):
        if not same_structure(first, e):
            from .errors import InvalidArgumentError

            raise InvalidArgumentError(f"Cannot add element {i} to the {what}: its structure {describe(e)} "
                                       f"differs from the first element's {describe(first)}.")
    columns = zip(*(flatten(e) for e in elements))
    return pack_as(first, [_stack_leaf(col, i, what) for i, col in enumerate(columns)])


def _stack_leaf(values, leaf_index, what):
    v0 = values[0]
    if any(map(_is_dataset, values)):  # (a map's lazy spec hid them from the refusal at build: ``nodes/batch.py``)
        raise TypeError(f"{what}: component {leaf_index} of the elements is a Dataset, which cannot be batched; use "
                        "flat_map/interleave (e.g. `flat_map(lambda w: w.batch(n))`).")
    if isinstance(v0, _COMPOSITES):
        from .errors import InvalidArgumentError

        raise InvalidArgumentError(f"Cannot {what} ragged or sparse values (leaf {leaf_index}): unbatch them, or "
                                   "convert them (to_list(), to_dense()) first.")
    if type(v0) is bytes and operator.countOf(map(type, values), bytes) == len(values):
        # scalar strings (records, lines): fromiter skips the shape discovery that ``out[:] = values`` runs
        # over the list (~25% of a batch of 1 KiB records)
        return np.fromiter(values, dtype=object, count=len(values))
    if isinstance(v0, bytes) or (isinstance(v0, np.ndarray) and v0.dtype == object):
        out = np.empty((len(values),) + np.shape(v0), dtype=object)
        shape0 = np.shape(v0)
        for i, v in enumerate(values):
            if np.shape(v) != shape0:  # assigning would broadcast (1,) into (3,) silently
                break
            out[i] = v
        else:
            return out
    try:
        if isinstance(v0, bytes) or (isinstance(v0, np.ndarray) and v0.dtype == object):
            raise ValueError("shapes differ")
        return np.stack(values) if isinstance(v0, np.ndarray) else np.array(values)
    except ValueError:
        shapes = [np.shape(v) for v in values]
        bad = next(i for i, s in enumerate(shapes) if s != shapes[0])
        from .errors import InvalidArgumentError

        raise InvalidArgumentError(
            f"Cannot add tensor to the {what}: number of elements does not match. Shapes are: "
            f"[tensor]: {list(shapes[bad])}, [batch]: {list(shapes[0])} (element {bad} of the batch, "
            f"leaf {leaf_index})") from None


def unstack_rows(batched, n: int) -> list:
    """Split a batched structure into its ``n`` rows (views, not copies)."""
    if not is_nested(batched):
        return list(batched[:n]) if isinstance(batched, np.ndarray) else [batched[i] for i in range(n)]
    leaves = flatten(batched)
    return [pack_as(batched, [leaf[i] for leaf in leaves]) for i in range(n)]


def batched_len(batched) -> int:
    leaves = flatten(batched)
    return len(leaves[0]) if leaves else 0


def iter_structure_paths(structure, prefix: str = "") -> Iterable[tuple[str, Any]]:
    """(path, leaf) pairs in ``flatten`` order, paths like ``[0]['image']``, for messages and fingerprints."""
    k = _kind(structure)
    if k == _LEAF:
        yield prefix or "<element>", structure
    elif k == _DICT or k == _MAPPING:
        for key in _sorted_keys(structure)[0]:
            yield from iter_structure_paths(structure[key], f"{prefix}[{key!r}]")
    elif k == _ATTRS:
        for n in _attrs_names(type(structure)):
            yield from iter_structure_paths(getattr(structure, n), f"{prefix}.{n}")
    else:
        for i, x in enumerate(structure):
            yield from iter_structure_paths(x, f"{prefix}[{i}]")
