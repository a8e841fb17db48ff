"""Random pipeline programs for the differential fuzzer (``fuzz_differential.py``).

A program is Python source text over the conformance adapter ``t`` (``conformance_cases`` docstring), numpy
``np`` and the helpers ``F`` (``Helpers(t)``), e.g.::

    t.Dataset.from_tensor_slices({"b": np.array([1, 2], dtype="int8"), "a": [0.5, 1.5]}).map(
        lambda *a: F.add1(F.one(a))).batch(2)

so the same text builds a tf.data pipeline (recorder's ``TFAdapter``) and a jaxfeed one
(``JaxfeedAdapter``), and a finding's repro is the text itself with ``t.`` read as ``tf.data.``.

``generate(rng)`` returns ``{"source": text, "ops": [text, ...], "compare": "exact"|"multiset"}``; the
program is ``source + "".join(ops)``. The generator keeps a rough model of the element (structure, dtypes,
ranks) so that most programs are valid; a wrong model only makes a program fail, on both sides.

Only numpy and the standard library (the TensorFlow Python has no jaxfeed).
"""

from __future__ import annotations

import collections
import random

import numpy as np

Point = collections.namedtuple("Point", ["x", "y"])
Pair = collections.namedtuple("Pair", ["first", "second"])
# how a ragged / sparse batch component is compared (both sides convert to these before encoding)
Ragged = collections.namedtuple("Ragged", ["values", "row_splits"])
Sparse = collections.namedtuple("Sparse", ["indices", "values", "dense_shape"])

INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
FLOAT_DTYPES = ["float16", "float32", "float64"]
NUMERIC = INT_DTYPES + FLOAT_DTYPES
ALL_DTYPES = NUMERIC + ["bool", "string"]
KEYS = ["zeta", "b", "a", "mid", "c", "alpha", "y", "x0"]


# ============================================================================================ helpers F
class Helpers:
    """Neutral functions over an element, written once for TensorFlow tensors and numpy values: they branch
    only on structure and dtype (static under tracing) and use Python operators and ``t.ops``."""

    def __init__(self, t):
        self.t = t
        self.ops = t.ops

    # ---------------------------------------------------------------- structure
    @staticmethod
    def one(a):
        return a[0] if len(a) == 1 else tuple(a)

    def flat(self, x):
        if isinstance(x, dict):
            return [v for k in sorted(x) for v in self.flat(x[k])]
        if isinstance(x, tuple):
            return [v for item in x for v in self.flat(item)]
        return [x]

    def tmap(self, fn, x):
        if isinstance(x, dict):
            return {k: self.tmap(fn, v) for k, v in x.items()}
        if isinstance(x, tuple) and hasattr(type(x), "_fields"):
            return type(x)(*[self.tmap(fn, v) for v in x])
        if isinstance(x, tuple):
            return tuple(self.tmap(fn, v) for v in x)
        return fn(x)

    @staticmethod
    def dtname(x):
        if isinstance(x, (bytes, str)):
            return "string"
        dt = getattr(x, "dtype", None)
        if dt is None:
            return "py:" + type(x).__name__
        name = getattr(dt, "name", str(dt))
        if name == "object" or name.startswith(("bytes", "str")):
            return "string"
        return name

    def kind(self, x):
        n = self.dtname(x)
        if n == "bool":
            return "bool"
        if n == "string":
            return "string"
        if n.startswith(("int", "uint")):
            return "int"
        if n.startswith(("float", "half", "double")):
            return "float"
        return "other"

    def rank(self, x):
        shape = getattr(x, "shape", None)
        return 0 if shape is None else len(shape)

    # ---------------------------------------------------------------- maps
    def add1(self, x):
        return self.tmap(lambda v: v + 1 if self.kind(v) in ("int", "float") else v, x)

    def cast(self, x, dt):
        def one(v):
            k = self.kind(v)
            if k == "string" or k == "other":
                return v
            if k == "float" and dt.startswith("uint"):
                return v
            return self.ops.cast(v, dt)

        return self.tmap(one, x)

    def swap(self, x):
        if isinstance(x, dict):
            return tuple(x[k] for k in x)
        if isinstance(x, tuple):
            return tuple(reversed(tuple(x)))
        return (x, x)

    def todict(self, x):
        leaves = self.flat(x)
        return {KEYS[i % len(KEYS)] + ("" if i < len(KEYS) else str(i)): v for i, v in enumerate(leaves)}

    def reorder(self, x):
        """The same structure with every dict's keys in reverse insertion order."""
        if isinstance(x, dict):
            return {k: self.reorder(x[k]) for k in reversed(list(x))}
        if isinstance(x, tuple) and hasattr(type(x), "_fields"):
            return type(x)(*[self.reorder(v) for v in x])
        if isinstance(x, tuple):
            return tuple(self.reorder(v) for v in x)
        return x

    def first(self, x):
        return self.flat(x)[0]

    def nest(self, x):
        return {"y": x, "b": (self.first(x),)}

    def point(self, x):
        leaves = self.flat(x)
        return Point(leaves[0], leaves[-1])

    def vary(self, x):
        """A vector of varying length (x % 3) from an integer scalar."""
        v = self._first_int(x)
        return self.ops.fill([v % 3], v)

    def _first_num(self, x):
        for v in self.flat(x):
            if self.kind(v) in ("int", "float", "bool"):
                return v
        return None

    def _first_int(self, x):
        for v in self.flat(x):
            if self.kind(v) == "int":
                return v
        return self.flat(x)[0]

    # ---------------------------------------------------------------- predicates and keys
    def _parity_source(self, x):
        v = self._first_num(x)
        if v is not None:
            return self.ops.reduce_sum(self.ops.cast(v, "int64"))
        s = self.flat(x)[0]
        if self.rank(s) == 0 and self.kind(s) == "string":
            return self.ops.cast(self.ops.size_bytes(s), "int64")
        return self.ops.cast(self.ops.size(s), "int64")

    def even(self, x):
        return self._parity_source(x) % 2 == 0

    def small(self, x, k):
        return self._parity_source(x) < k

    def key(self, x, k):
        return self._parity_source(x) % k

    def size0(self, x):
        return self.ops.size(self.flat(x)[0])

    def maybe_fail(self, x, bad):
        """x, except that an element whose first leaf (an integer scalar) equals ``bad`` raises ValueError."""
        leaves = self.flat(x)
        v = leaves[0]
        if self.kind(v) == "int" and self.rank(v) == 0:
            failing = self.ops.py_raise(v, bad)
            if isinstance(x, dict):
                k = sorted(x)[0]
                if not isinstance(x[k], (dict, tuple)):
                    return {kk: (failing if kk == k else vv) for kk, vv in x.items()}
                return x
            if isinstance(x, tuple):
                if not isinstance(x[0], (dict, tuple)):
                    return type(x)(failing, *tuple(x)[1:]) if hasattr(type(x), "_fields") else (failing,) + tuple(x)[1:]
                return x
            return failing
        return x

    # ---------------------------------------------------------------- datasets from elements
    def zipw(self, a):
        x = self.one(a)
        if hasattr(x, "element_spec"):
            return x
        return self.t.Dataset.zip(x)

    def tensors(self, a, r):
        return self.t.Dataset.from_tensors(self.one(a)).repeat(r)

    def slices(self, a):
        return self.t.Dataset.from_tensor_slices(self.one(a))

    # ---------------------------------------------------------------- generators
    def gen(self, data, n):
        def generator():
            for i in range(n):
                yield self.tmap(lambda v: v[i], data)

        return generator

    @staticmethod
    def gen_vary(dt, n):
        def generator():
            for i in range(n):
                yield np.arange(i % 3).astype(dt)

        return generator


def namespace(t):
    return {"t": t, "np": np, "F": Helpers(t), "Point": Point, "Pair": Pair}


def build(t, text):
    return eval(text, namespace(t))  # noqa: S307 - the fuzzer's own generated programs


# ============================================================================================ model
def leaf(dt, shape, vary=False):
    return {"k": "leaf", "dt": dt, "shape": list(shape), "vary": vary}


def leaves(m):
    if m["k"] == "leaf":
        return [m]
    if m["k"] == "dict":
        return [x for k, item in sorted(zip(m["keys"], m["items"])) for x in leaves(item)]
    return [x for item in m["items"] for x in leaves(item)]


def mapm(fn, m):
    if m["k"] == "leaf":
        return fn(m)
    out = dict(m)
    out["items"] = [mapm(fn, item) for item in m["items"]]
    return out


def is_plain_tuple(m):
    return m["k"] == "tuple"


# ============================================================================================ values
def _values(rng, dt, shape, edge):
    n = int(np.prod(shape)) if shape else 1
    if dt == "bool":
        flat = [rng.random() < 0.5 for _ in range(n)]
    elif dt == "string":
        alphabet = "abcxyz\u00e9"
        flat = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 4))) for _ in range(n)]
    elif dt in INT_DTYPES:
        info = np.iinfo(dt)
        lo, hi = (0, 20) if dt.startswith("uint") else (-10, 20)
        flat = []
        for _ in range(n):
            if edge and rng.random() < 0.2:
                flat.append(int(rng.choice([info.min, info.max])))
            else:
                flat.append(rng.randrange(lo, hi))
    else:
        flat = [rng.randrange(-40, 40) / 4 for _ in range(n)]

    def nestl(flat, shape):
        if not shape:
            return flat[0]
        step = len(flat) // shape[0] if shape[0] else 0
        return [nestl(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]

    if shape and shape[0] == 0:
        return _empty(shape)
    return nestl(flat, list(shape))


def _empty(shape):
    if not shape:
        return []
    if shape[0] == 0:
        return []
    return [_empty(shape[1:]) for _ in range(shape[0])]


def leaf_text(rng, dt, shape, allow_python=True, edge=True):
    """(source text, model dtype) of a value of dtype ``dt`` and ``shape``."""
    vals = _values(rng, dt, shape, edge)
    form = rng.random()
    if dt == "string":
        if form < 0.3 and allow_python:
            return repr(vals), "string"
        if form < 0.55:
            return f"np.array({_bytes(vals)!r}, dtype=object)" if shape else repr(_bytes(vals)), "string"
        if form < 0.8:
            return f"np.array({_bytes(vals)!r})", "string"
        if shape and 0 in shape:  # an empty np.array(list) is float64: not a string array
            return f"np.array({_bytes(vals)!r}, dtype=object)", "string"
        return f"np.array({vals!r})", "string"
    if dt == "bool":
        if form < 0.3 and allow_python:
            return repr(vals), "bool"
        return f"np.array({vals!r}, dtype='bool')", "bool"
    if allow_python and form < 0.2 and dt in ("int32", "float32"):
        if dt == "int32":
            vals = _clip_nested(vals, -2**31, 2**31 - 1)
        return repr(vals), dt
    if not shape and form < 0.5:
        return f"np.{dt}({vals!r})", dt
    return f"np.array({vals!r}, dtype={dt!r})", dt


def _clip_nested(v, lo, hi):
    if isinstance(v, list):
        return [_clip_nested(x, lo, hi) for x in v]
    return max(lo, min(hi, v))


def _bytes(v):
    if isinstance(v, list):
        return [_bytes(x) for x in v]
    return v.encode("utf-8")


# ============================================================================================ sources
def _struct(rng, depth=0):
    """A random structure of dtype/inner-shape leaves: the model with shapes lacking the slice dim."""
    r = rng.random()
    if depth >= 2 or r < 0.35:
        dt = rng.choice(ALL_DTYPES)
        inner = rng.choice([[], [], [], [2], [3], [2, 2], [0], [1, 3]])
        return leaf(dt, inner)
    if r < 0.6:
        n = rng.randint(2, 4)
        keys = rng.sample(KEYS, n)
        return {"k": "dict", "keys": keys, "items": [_struct(rng, depth + 1) for _ in keys]}
    if r < 0.85:
        n = rng.randint(2, 3)
        return {"k": "tuple", "items": [_struct(rng, depth + 1) for _ in range(n)]}
    return {"k": "named", "cls": rng.choice(["Point", "Pair"]), "items": [_struct(rng, depth + 1) for _ in range(2)]}


def _struct_text(rng, m, lead, allow_python=True):
    """Text of a value of structure ``m`` whose leaves get the leading shape ``lead``; returns (text, model)."""
    if m["k"] == "leaf":
        text, dt = leaf_text(rng, m["dt"], lead + m["shape"], allow_python)
        return text, leaf(dt, m["shape"])
    parts = [_struct_text(rng, item, lead, allow_python) for item in m["items"]]
    out = dict(m)
    out["items"] = [p[1] for p in parts]
    if m["k"] == "dict":
        return "{" + ", ".join(f"{k!r}: {p[0]}" for k, p in zip(m["keys"], parts)) + "}", out
    if m["k"] == "tuple":
        return "(" + ", ".join(p[0] for p in parts) + ("," if len(parts) == 1 else "") + ")", out
    return f"{m['cls']}(" + ", ".join(p[0] for p in parts) + ")", out


def _spec_text(m, lead=()):
    return _struct_of(m, lambda leaf: f"t.spec({list(lead) + leaf['shape']!r}, {leaf['dt']!r})")


def gen_source(rng):
    """(text, model, cardinality estimate or None for unknown)."""
    r = rng.random()
    if r < 0.12:
        args = rng.choice([(rng.randint(0, 9),), (rng.randint(-3, 3), rng.randint(0, 10)),
                           (rng.randint(0, 12), rng.randint(-2, 6), rng.choice([-3, -1, 2, 3]))])
        ot = rng.choice([None, None, "int32", "int64", "float32", "int8", "uint8", "float64"])
        text = "t.Dataset.range(" + ", ".join(map(str, args)) + (f", output_type=t.dtype({ot!r})" if ot else "") + ")"
        n = len(range(*args))
        return text, leaf(ot or "int64", []), n
    if r < 0.55:
        m = _struct(rng)
        n = rng.choice([0, 1, 2, 3, 4, 5, 6, 7, 8])
        text, m = _struct_text(rng, m, [n])
        return f"t.Dataset.from_tensor_slices({text})", m, n
    if r < 0.65:
        m = _struct(rng)
        text, m = _struct_text(rng, m, [])
        return f"t.Dataset.from_tensors({text})", m, 1
    if r < 0.75:
        m = _struct(rng)
        n = rng.randint(0, 6)
        text, m = _struct_text(rng, m, [n], allow_python=False)
        if rng.random() < 0.5:
            sm = m  # exact signature
        else:
            sm = mapm(lambda lf: leaf(lf["dt"], [None] * len(lf["shape"])), m)
        text = "t.Dataset.from_generator(F.gen(" + text + f", {n}), output_signature={_spec_text(sm)})"
        return text, sm, None
    if r < 0.8:
        dt = rng.choice(NUMERIC)
        n = rng.randint(0, 7)
        return (f"t.Dataset.from_generator(F.gen_vary({dt!r}, {n}), output_signature=t.spec([None], {dt!r}))",
                leaf(dt, [None], vary=True), None)
    if r < 0.88:
        n = rng.randint(0, 8)
        form = rng.random()
        if form < 0.5:
            return f"t.Dataset.range({n}).map(F.vary)", leaf("int64", [None], vary=True), n
        return (f"t.Dataset.range({n}).map(lambda x: {{'s': F.vary(x), 'a': x}})",
                {"k": "dict", "keys": ["s", "a"], "items": [leaf("int64", [None], vary=True), leaf("int64", [])]}, n)
    if r < 0.95:
        files = rng.sample(["a.tfrecord", "b.tfrecord", "c.tfrecord", "d.tfrecord", "empty.tfrecord"],
                           rng.randint(1, 3))
        arg = ", ".join(f"t.files[{f!r}]" for f in files)
        kw = rng.choice(["", "", ", num_parallel_reads=2", ", buffer_size=7"])
        return f"t.TFRecordDataset([{arg}]{kw})", leaf("string", []), None
    files = rng.sample(["lines.txt", "crlf.txt", "trailing.txt", "empty.txt", "lines2.txt"], rng.randint(1, 2))
    arg = ", ".join(f"t.files[{f!r}]" for f in files)
    return f"t.TextLineDataset([{arg}])", leaf("string", []), None


# ============================================================================================ transformations
def _batched(m, n=None, vary=False):
    return mapm(lambda lf: leaf(lf["dt"], [n] + lf["shape"], lf["vary"] or vary), m)


def _unbatched(m):
    return mapm(lambda lf: leaf(lf["dt"], lf["shape"][1:], lf["vary"]), m)


def _padding_value_text(rng, dt):
    if dt == "string":
        return rng.choice(["'?'", "b'pad'", "np.array(b'-')"])
    if dt == "bool":
        return "np.array(True)"
    if dt in INT_DTYPES:
        v = rng.choice([7, 1]) if dt.startswith("uint") else rng.choice([-1, 7])
        if dt == "int32" and rng.random() < 0.5:
            return str(v)
        return f"np.array({v}, dtype={dt!r})"
    return f"np.array({rng.choice([-1.5, 0.25])}, dtype={dt!r})"


def _struct_of(m, leaf_fn):
    if m["k"] == "leaf":
        return leaf_fn(m)
    parts = [_struct_of(item, leaf_fn) for item in m["items"]]
    if m["k"] == "dict":
        return "{" + ", ".join(f"{k!r}: {p}" for k, p in zip(m["keys"], parts)) + "}"
    if m["k"] == "tuple":
        return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
    return f"{m['cls']}(" + ", ".join(parts) + ")"


class State:
    def __init__(self, model, card):
        self.m = model
        self.card = card  # None: unknown (the generator's guess only)
        self.infinite = False
        self.shuffled = False


def gen_op(rng, s: State):
    """One transformation as text, updating the state; None to retry."""
    m = s.m
    lv = leaves(m)
    all_ranked = all(len(x["shape"]) >= 1 for x in lv)
    numeric_first = bool(lv) and lv[0]["dt"] not in ("string",)
    if s.infinite:
        k = rng.randint(0, 12)
        s.infinite = False
        s.card = k
        return f".take({k})"
    if s.shuffled:
        choice = rng.choice(["map_add", "map_cast", "prefetch", "filter", "cache", "map_identity"])
    else:
        choice = rng.choices(
            ["map_add", "map_cast", "map_restructure", "filter", "batch", "padded_batch", "unbatch", "rebatch",
             "take", "skip", "shard", "repeat", "repeat_take", "zip", "concatenate", "enumerate", "window",
             "window_raw", "interleave", "flat_map", "scan", "unique", "take_while", "prefetch", "cache",
             "shuffle", "ragged_batch", "bucket", "group_by_window", "fail_ignore", "apply", "map_parallel",
             "concat_reordered", "map_const", "interleave_nondet"],
            weights=[4, 3, 4, 3, 5, 4, 3, 2, 2, 2, 2, 2, 1, 3, 3, 2, 3, 1, 3, 2, 2, 2, 2, 1, 1, 1, 2, 2, 2, 2, 1, 2,
                     3, 3, 1])[0]
    if choice == "concat_reordered":
        s.card = None if s.card is None else 2 * s.card
        return ".apply(lambda d: d.concatenate(d.map(lambda *a: F.reorder(F.one(a)))))"
    if choice == "map_const":
        const = rng.choice(["1", "1.5", "'s'", "b'b'", "True", "2**40", "np.float64(0.5)", "np.uint8(3)",
                            "[1, 2]", "[1.5, 2]", "(1, 'x')", "{'k': 1, 'a': 2.5}", "np.int64(7)", "-2**31"])
        s.m = leaf("int32", [])  # a rough guess only
        if rng.random() < 0.5:
            return f".map(lambda *a: {const})"
        s.m = {"k": "tuple", "items": [m, s.m]}
        return f".map(lambda *a: (F.one(a), {const}))"
    if choice == "interleave_nondet":
        s.shuffled = True
        s.card = None
        return (f".interleave(lambda *a: F.tensors(a, {rng.randint(1, 3)}), cycle_length={rng.randint(1, 3)}, "
                f"num_parallel_calls={rng.choice([2, 't.AUTOTUNE'])}, deterministic=False)")
    if choice == "map_identity":
        return ".map(lambda *a: F.one(a))"
    if choice == "map_add":
        s.m = mapm(lambda lf: leaf(lf["dt"], lf["shape"], lf["vary"]), m)
        form = rng.random()
        if is_plain_tuple(m) and len(m["items"]) == 2 and form < 0.4:
            return ".map(lambda u, v: (F.add1(u), v))"
        if m["k"] == "dict" and form < 0.4:
            k = m["keys"][0]
            return f".map(lambda d: {{**d, {k!r}: F.add1(d[{k!r}])}})"
        return ".map(lambda *a: F.add1(F.one(a)))"
    if choice == "map_cast":
        dt = rng.choice(NUMERIC + ["bool"])

        def cast(lf):
            if lf["dt"] == "string" or (lf["dt"] in FLOAT_DTYPES and dt.startswith("uint")):
                return lf
            return leaf(dt, lf["shape"], lf["vary"])

        s.m = mapm(cast, m)
        return f".map(lambda *a: F.cast(F.one(a), {dt!r}))"
    if choice == "map_parallel":
        npc = rng.choice([1, 2, 3, "t.AUTOTUNE"])
        det = rng.choice([None, True])
        return f".map(lambda *a: F.add1(F.one(a)), num_parallel_calls={npc}" + (
            f", deterministic={det})" if det is not None else ")")
    if choice == "map_restructure":
        fn = rng.choice(["swap", "todict", "first", "nest", "point", "list"])
        if fn == "swap":
            if m["k"] == "dict":
                s.m = {"k": "tuple", "items": list(m["items"])}
            elif m["k"] in ("tuple", "named"):
                s.m = {"k": "tuple", "items": list(reversed(m["items"]))}
            else:
                s.m = {"k": "tuple", "items": [m, m]}
        elif fn == "todict":
            lvs = leaves(m)
            keys = [KEYS[i % len(KEYS)] + ("" if i < len(KEYS) else str(i)) for i in range(len(lvs))]
            s.m = {"k": "dict", "keys": keys, "items": lvs}
        elif fn == "first":
            s.m = leaves(m)[0]
        elif fn == "nest":
            s.m = {"k": "dict", "keys": ["y", "b"], "items": [m, {"k": "tuple", "items": [leaves(m)[0]]}]}
        elif fn == "point":
            lvs = leaves(m)
            s.m = {"k": "named", "cls": "Point", "items": [lvs[0], lvs[-1]]}
        else:  # a list returned from a function: a tuple at top level
            lvs = leaves(m)
            s.m = {"k": "tuple", "items": [lvs[0], lvs[-1]]}
            return ".map(lambda *a: [F.first(F.one(a)), F.flat(F.one(a))[-1]])"
        return f".map(lambda *a: F.{fn}(F.one(a)))"
    if choice == "filter":
        s.card = None
        if rng.random() < 0.5:
            return ".filter(lambda *a: F.even(F.one(a)))"
        return f".filter(lambda *a: F.small(F.one(a), {rng.randint(-2, 8)}))"
    if choice == "take_while":
        s.card = None
        return f".take_while(lambda *a: F.small(F.one(a), {rng.randint(0, 12)}))"
    if choice == "batch":
        b = rng.randint(1, 4)
        drop = rng.random() < 0.4
        extra = ""
        if rng.random() < 0.2:
            extra = f", num_parallel_calls={rng.choice([2, 't.AUTOTUNE'])}, deterministic=True"
        s.m = _batched(m, b if drop else None)
        if s.card is not None:
            s.card = s.card // b if drop else -(-s.card // b)
        return f".batch({b}" + (", drop_remainder=True" if drop else "") + extra + ")"
    if choice == "padded_batch":
        b = rng.randint(1, 4)
        drop = rng.random() < 0.3
        text = f".padded_batch({b}"
        if drop:
            text += ", drop_remainder=True"
        form = rng.random()
        if form < 0.35:
            def ps(lf):
                return repr([None] * len(lf["shape"]) if rng.random() < 0.7 else [-1] * len(lf["shape"]))
            text += ", padded_shapes=" + _struct_of(m, ps)
        elif form < 0.5:
            def ps(lf):
                return repr([d if d is not None and not lf["vary"] else 5 for d in lf["shape"]])
            text += ", padded_shapes=" + _struct_of(m, ps)
        if rng.random() < 0.4:
            text += ", padding_values=" + _struct_of(m, lambda lf: _padding_value_text(rng, lf["dt"]))
        s.m = _batched(m, b if drop else None)
        s.m = mapm(lambda lf: leaf(lf["dt"], lf["shape"], False), s.m)
        if s.card is not None:
            s.card = s.card // b if drop else -(-s.card // b)
        return text + ")"
    if choice == "unbatch":
        s.m = _unbatched(m)
        s.card = None
        return ".unbatch()"
    if choice == "rebatch":
        b = rng.choice([1, 2, 3, "[1, 2]", "[3, 1]"])  # a 0 size: a deliberate difference (rebatch_zero_two)
        drop = rng.random() < 0.3
        s.card = None
        return f".rebatch({b}" + (", drop_remainder=True" if drop else "") + ")"
    if choice == "take":
        k = rng.randint(-1, 8)
        if s.card is not None and k >= 0:
            s.card = min(s.card, k)
        return f".take({k})"
    if choice == "skip":
        k = rng.randint(-1, 5)
        if s.card is not None:
            s.card = 0 if k < 0 else max(0, s.card - k)
        return f".skip({k})"
    if choice == "shard":
        n = rng.randint(1, 3)
        i = rng.randint(0, n - 1)
        s.card = None
        return f".shard({n}, {i})"
    if choice == "repeat":
        k = rng.randint(0, 3)
        if s.card is not None:
            s.card *= k
        return f".repeat({k})"
    if choice == "repeat_take":
        s.infinite = True
        return ".repeat()"
    if choice == "zip":
        other_text, other_m, other_card = gen_source(rng)
        form = rng.random()
        if s.card is not None and other_card is not None:
            s.card = min(s.card, other_card)
        else:
            s.card = None
        if form < 0.4:
            s.m = {"k": "tuple", "items": [m, other_m]}
            return f".apply(lambda d: t.Dataset.zip(d, {other_text}))"
        if form < 0.7:
            s.m = {"k": "dict", "keys": ["right", "left"], "items": [other_m, m]}
            return f".apply(lambda d: t.Dataset.zip({{'right': {other_text}, 'left': d}}))"
        s.m = {"k": "tuple", "items": [m, m]}
        return ".apply(lambda d: t.Dataset.zip((d, d.skip(1))))"
    if choice == "concatenate":
        form = rng.random()
        s.card = None
        if form < 0.5:
            return ".apply(lambda d: d.concatenate(d.take(2)))"
        if form < 0.75:
            other_text, other_m, _ = gen_source(rng)
            return f".concatenate({other_text})"
        return ".apply(lambda d: d.concatenate(d.map(lambda *a: F.cast(F.one(a), 'float64'))))"
    if choice == "enumerate":
        start = rng.choice([0, 0, 3, -2])
        s.m = {"k": "tuple", "items": [leaf("int64", []), m]}
        return f".enumerate({start})" if start else ".enumerate()"
    if choice == "window":
        size = rng.randint(1, 4)
        shift = rng.choice([None, 1, 2, 3])
        stride = rng.choice([1, 1, 2])
        drop = rng.random() < 0.4
        inner = rng.randint(1, 3)
        s.card = None
        s.m = _batched(m, None)
        args = f"{size}" + (f", shift={shift}" if shift else "") + (f", stride={stride}" if stride != 1 else "") + (
            ", drop_remainder=True" if drop else "")
        return f".window({args}).flat_map(lambda *w: F.zipw(w).batch({inner}))"
    if choice == "window_raw":
        s.card = None
        return f".window({rng.randint(1, 3)}).take(3)"
    if choice == "interleave":
        cyc = rng.choice([1, 2, 3, 4])
        blk = rng.choice([None, 1, 2, 3])
        npc = rng.choice([None, None, 1, 2, "t.AUTOTUNE"])
        det = rng.choice([None, None, True])
        fn = rng.choice([f"F.tensors(a, {rng.randint(0, 3)})", "F.slices(a)"])
        if fn == "F.slices(a)":
            s.m = _unbatched(m)
        s.card = None
        text = f".interleave(lambda *a: {fn}, cycle_length={cyc}"
        if blk:
            text += f", block_length={blk}"
        if npc:
            text += f", num_parallel_calls={npc}"
        if det is not None:
            text += f", deterministic={det}"
        return text + ")"
    if choice == "flat_map":
        fn = rng.choice([f"F.tensors(a, {rng.randint(0, 3)})", "F.slices(a)"])
        if fn == "F.slices(a)":
            s.m = _unbatched(m)
        s.card = None
        return f".flat_map(lambda *a: {fn})"
    if choice == "scan":
        form = rng.random()
        if form < 0.5:
            init = rng.choice(["np.int64(0)", "0", "np.array(0, dtype='int16')"])
            s.m = {"k": "tuple", "items": [leaf("int64", []), m]}
            return f".scan({init}, lambda st, x: (st + 1, (st, x)))"
        s.m = leaf("int64", [])
        return ".scan(np.int64(0), lambda st, *a: (st + F.key(F.one(a), 5), st))"
    if choice == "unique":
        s.card = None
        if m["k"] != "leaf" and rng.random() < 0.7:
            s.m = leaves(m)[0]
            return ".map(lambda *a: F.first(F.one(a))).unique()"
        return ".unique()"
    if choice == "prefetch":
        return f".prefetch({rng.choice([1, 2, 't.AUTOTUNE'])})"
    if choice == "cache":
        return ".cache()"
    if choice == "shuffle":
        s.shuffled = True
        return f".shuffle({rng.randint(1, 8)}, seed={rng.randint(0, 99)})"
    if choice == "ragged_batch":
        b = rng.randint(1, 3)
        s.card = None
        s.m = _batched(m, None)
        return f".ragged_batch({b}" + (", drop_remainder=True" if rng.random() < 0.3 else "") + ")"
    if choice == "bucket":
        bounds = sorted(rng.sample([1, 2, 3, 4, 5, 6], rng.randint(1, 2)))
        sizes = [rng.randint(1, 3) for _ in range(len(bounds) + 1)]
        extra = ""
        if rng.random() < 0.3:
            extra += ", drop_remainder=True"
        if rng.random() < 0.3:
            extra += ", pad_to_bucket_boundary=True"
            bounds = [b + 2 for b in bounds]
        s.card = None
        s.m = mapm(lambda lf: leaf(lf["dt"], [None] + [None] * len(lf["shape"]), False), m)
        return f".bucket_by_sequence_length(lambda *a: F.size0(F.one(a)), {bounds}, {sizes}{extra})"
    if choice == "group_by_window":
        k = rng.randint(1, 3)
        w = rng.randint(1, 3)
        s.card = None
        s.m = _batched(m, None)
        return f".group_by_window(lambda *a: F.key(F.one(a), {k}), lambda key, w: w.batch({w}), window_size={w})"
    if choice == "fail_ignore":
        bad = rng.randint(0, 5)
        s.card = None
        return f".map(lambda *a: F.maybe_fail(F.one(a), {bad})).ignore_errors()"
    if choice == "apply":
        b = rng.randint(1, 3)
        s.m = _batched(m, None)
        if s.card is not None:
            s.card = -(-s.card // b)
        return f".apply(lambda d: d.batch({b}))"
    return None


def generate(rng: random.Random, max_ops=6):
    source, model, card = gen_source(rng)
    s = State(model, card)
    ops = []
    n = rng.randint(1, max_ops)
    tries = 0
    while len(ops) < n and tries < 50:
        tries += 1
        op = gen_op(rng, s)
        if op is not None:
            ops.append(op)
    if s.infinite:
        ops.append(f".take({rng.randint(0, 12)})")
    compare = "multiset" if s.shuffled else "exact"
    return {"source": source, "ops": ops, "compare": compare}


def text_of(prog):
    return prog["source"] + "".join(prog["ops"])
