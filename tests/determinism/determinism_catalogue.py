"""A catalogue of user functions for the stateful-function inspection: pure ones (must not be flagged)
and stateful ones (must be flagged, with the expected finding kind). Module-level so that globals,
closures and same-module helpers look the way they do in user code."""

import collections
import datetime
import functools
import math
import os
import random
import re
import time
import uuid

import numpy as np

COUNTER = [0]
CACHE = {}
TABLE = np.arange(10, dtype=np.float32)  # read-only use of a global array is pure
SCALE = 2.5
SHARED_RNG = np.random.default_rng(0)
SHARED_PY_RNG = random.Random(0)
_total = 0


def _helper_pure(x):
    return np.tanh(x) * SCALE


def _helper_global_rng(x):
    return x + np.random.normal()


def _helper_deeper(x):
    return _helper_global_rng(x) * 2


class Normalizer:
    """A callable object that only reads its attributes: pure."""

    def __init__(self, mean, std):
        self.mean, self.std = mean, std

    def __call__(self, x):
        return (x - self.mean) / self.std


class CountingMapper:
    """A callable object that counts its calls: stateful."""

    def __init__(self):
        self.calls = 0

    def __call__(self, x):
        self.calls += 1
        return x


class RngHolder:
    def __init__(self):
        self.rng = np.random.default_rng(1)

    def __call__(self, x):
        return x + self.rng.normal()


def _make_closure_counter():
    count = 0

    def fn(x):
        nonlocal count
        count += 1
        return x + count

    return fn


def _make_closure_pure():
    offset = 3

    def fn(x):
        return x + offset

    return fn


def _global_writer(x):
    global _total
    _total += 1
    return x


def _seeded_local_generator(x):
    rng = np.random.default_rng(1234)
    return x + rng.normal()


def _local_list_work(x):
    out = []
    for i in range(3):
        out.append(x * i)
    d = {}
    d["a"] = x
    return np.stack(out).sum() + d["a"]


def _string_work(s):
    text = s.decode("utf-8") if isinstance(s, bytes) else str(s)
    words = re.split(r"\s+", text.strip().lower())
    return " ".join(sorted(words)).encode()


def _comprehension(x):
    return sum(v * v for v in [x, x + 1, x + 2]) + len({k: k for k in range(3)})


def _math_work(x):
    return math.sqrt(abs(float(x))) + math.log1p(abs(float(x)))


def _writes_file(x):
    with open(os.devnull, "w") as f:
        f.write(str(x))
    return x


def _with_rng_style(x, rng):
    return x + rng.normal()  # the generator is an argument: per-element, stateless


def _dict_of_ops(x):
    ops = {"a": np.sin, "b": np.cos}
    return ops["a"](x) + ops["b"](x)


def _namedtuple_work(x):
    Point = collections.namedtuple("Point", "x y")
    p = Point(x, x * 2)
    return p.x + p.y


def _printing(x):
    print("value", x)  # output only: not state that changes the data
    return x


PURE = {
    "numpy_math": lambda x: np.sqrt(np.abs(x)) + np.exp(-x),
    "cast_and_scale": lambda x: x.astype(np.float32) / 255.0,
    "tuple_result": lambda x, y: (x * 2, y + 1),
    "global_constant_read": lambda x: x * SCALE,
    "global_array_read": lambda x: TABLE[x % 10],
    "helper_same_module": lambda x: _helper_pure(x),
    "callable_object_reading_attrs": Normalizer(0.5, 2.0),
    "closure_constant": _make_closure_pure(),
    "seeded_local_generator": _seeded_local_generator,
    "local_list_and_dict": _local_list_work,
    "string_work": _string_work,
    "comprehension": _comprehension,
    "math_module": _math_work,
    "with_rng_argument": _with_rng_style,
    "partial_of_pure": functools.partial(np.clip, a_min=0, a_max=1),
    "dict_of_ufuncs": _dict_of_ops,
    "namedtuple": _namedtuple_work,
    "print_is_output_only": _printing,
    "numpy_ufunc_itself": np.square,
    "reshape_and_transpose": lambda x: np.transpose(np.reshape(x, (-1, 1))),
    "string_format": lambda s: f"id-{s}".encode(),
    "numpy_seeded_generator_inline": lambda x: np.random.default_rng(7).permutation(x),
    "bytes_ops": lambda b: b.upper().replace(b"A", b"B"),
}

STATEFUL = {
    # name: (function, expected finding kind)
    "numpy_legacy_rand": (lambda x: x + np.random.rand(), "global_rng"),
    "numpy_legacy_shuffle": (lambda x: np.random.shuffle(x), "global_rng"),
    "numpy_legacy_randint": (lambda x: x + np.random.randint(0, 5), "global_rng"),
    "python_random_random": (lambda x: x + random.random(), "global_rng"),
    "python_random_choice": (lambda x: random.choice([x, -x]), "global_rng"),
    "helper_uses_global_rng": (lambda x: _helper_global_rng(x), "global_rng"),
    "two_levels_of_helpers": (lambda x: _helper_deeper(x), "global_rng"),
    "shared_generator_global": (lambda x: x + SHARED_RNG.normal(), "shared_rng"),
    "shared_python_random": (lambda x: x + SHARED_PY_RNG.random(), "shared_rng"),
    "generator_held_by_self": (RngHolder(), "shared_rng"),
    "global_list_append": (lambda x: COUNTER.append(x) or x, "mutation"),
    "global_dict_store": (lambda x: CACHE.__setitem__(int(x), x) or x, "mutation"),
    "global_subscript_store": (lambda x: _store_in_cache(x), "mutation"),
    "callable_counting_self": (CountingMapper(), "mutation"),
    "nonlocal_counter": (_make_closure_counter(), "nonlocal_write"),
    "global_statement": (_global_writer, "global_write"),
    "writes_a_file": (_writes_file, "io"),
    "unseeded_default_rng": (lambda x: x + np.random.default_rng().normal(), "unseeded_generator"),
    "unseeded_python_Random": (lambda x: x + random.Random().random(), "unseeded_generator"),
    "os_urandom": (lambda x: os.urandom(4), "entropy"),
    "uuid4": (lambda x: str(uuid.uuid4()).encode(), "entropy"),
    "time_time": (lambda x: x + time.time(), "clock"),
    "datetime_now": (lambda x: str(datetime.datetime.now()).encode(), "clock"),
    "legacy_seed_call": (lambda x: np.random.seed(int(x)) or x, "global_rng"),
}


def _store_in_cache(x):
    CACHE[int(x)] = x
    return x
