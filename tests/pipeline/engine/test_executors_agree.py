"""Whatever runs a map -- the consumer's thread, a thread pool, worker processes (which AUTOTUNE may pick
without being asked) -- its elements are the same: the same Python types, dtypes, shapes and bytes, whether
taken one by one or batched.

A bug this found: a function returning a 0-d array gave 0-d arrays on threads but numpy scalars from worker
processes (structured ones: ``np.void``), whose blocks crossed stacked and came back as rows."""

import numpy as np
import pytest

from jaxfeed.pipeline import Dataset

EXECUTORS = {"threads": {"num_parallel_calls": 2}, "processes": {"num_parallel_calls": 2, "executor": "process"}}


def result_of(kind):
    def fn(x):
        x = int(x)
        return {
            "0-d float array": lambda: np.array(x * 1.5),
            "0-d int8 array": lambda: np.array(x, dtype=np.int8),
            "0-d structured array": lambda: np.array((x, 1.5), dtype=[("a", "<i4"), ("b", "<f8")]),
            "numpy scalar": lambda: np.float16(x) / np.float16(3),
            "big-endian array": lambda: np.array([x, x + 1], dtype=">i4"),
            "bool scalar": lambda: np.bool_(x % 2),
            "complex scalar": lambda: np.complex64(x + 1j),
            "datetime scalar": lambda: np.datetime64("2020-01-01") + np.timedelta64(x, "D"),
            "unicode scalar": lambda: np.str_("é" * (x % 3)),
            "unicode array": lambda: np.array(["a" * x, "b"], dtype="U"),
            "Python str": lambda: "x" * (x % 4),
            "bytes array": lambda: np.array([b"a" * x, b"b"], dtype="S"),
            "strided view": lambda: np.arange(x, x + 20, dtype=np.int64).reshape(4, 5)[:, ::2],
            "Fortran-ordered array": lambda: np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4) + x),
            "empty array": lambda: np.zeros((0, 3), np.int16),
            "large array": lambda: np.full((300, 300), x, np.float64),
            "dict of a tuple": lambda: {"b": np.int32(x), "a": (np.float64(x), b"s")},
            "large Python int": lambda: 2 ** 40 + x,
            "Python float": lambda: x / 7,
            "uint64 scalar": lambda: np.uint64(2 ** 63 + x),
            "object array of bytes": lambda: np.array([b"a", b"bc"], dtype=object),
        }[kind]()

    return fn


KINDS = ["0-d float array", "0-d int8 array", "0-d structured array", "numpy scalar", "big-endian array",
         "bool scalar", "complex scalar", "datetime scalar", "unicode scalar", "unicode array", "Python str",
         "bytes array", "strided view", "Fortran-ordered array", "empty array", "large array", "dict of a tuple",
         "large Python int", "Python float", "uint64 scalar", "object array of bytes"]


def described(value):
    if isinstance(value, dict):
        return {k: described(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(described(v) for v in value)
    a = np.asarray(value)
    dtype = str(a.dtype.descr) if a.dtype.names else a.dtype.str
    return type(value), dtype, a.shape, (repr(a.tolist()) if a.dtype == object else a.tobytes())


@pytest.mark.parametrize("batch", [None, 3])
@pytest.mark.parametrize("kind", KINDS)
def test_every_executor_gives_the_elements_the_consumers_thread_gives(kind, batch):
    def run(**kw):
        ds = Dataset.range(7).map(result_of(kind), **kw)
        return [described(x) for x in (ds if batch is None else ds.batch(batch))]

    want = run()
    for name, kw in EXECUTORS.items():
        assert run(**kw) == want, name
