"""The elementwise proof: what it accepts runs on a batch with the bits of running it on each element."""

import sys
import types
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from jaxfeed.pipeline.passes.elementwise_proof import Leaf, NotProven, prove_elementwise

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64"]
BINARY = ["+", "-", "*", "/", "//", "%", "**", "&", "|", "^", "<<", ">>", "<", "<=", "==", "!=", ">", ">="]
UNARY = ["-", "+", "~"]


def _function(source):
    namespace = {"np": np}
    exec(f"def f(a, b):\n    return {source}\n", namespace)  # noqa: S102 - test code builds test functions
    return namespace["f"]


@st.composite
def expressions(draw, depth=3):
    """Python source of an expression over the arguments a and b and small number constants."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(["a", "b", "a", "b", "1", "2", "3", "0", "-1", "7", "0.5", "2.0", "True",
                                     "255", "-128", "40000", "2**31", "2**63"]))
    if draw(st.integers(0, 4)) == 0:
        return f"({draw(st.sampled_from(UNARY))}{draw(expressions(depth=depth - 1))})"
    if draw(st.integers(0, 3)) == 0:  # the calls the proof follows (on Python 3.11), and some it refuses
        inner = draw(expressions(depth=depth - 1))
        return draw(st.sampled_from([
            f"np.sqrt({inner})", f"np.abs({inner})", f"abs({inner})", f"np.square({inner})", f"np.floor({inner})",
            f"np.ceil({inner})", f"np.trunc({inner})", f"np.exp({inner})", f"np.minimum({inner}, a)",
            f"({inner}).astype(np.{draw(st.sampled_from(DTYPES))})", f"({inner}).astype('{draw(st.sampled_from(DTYPES))}')",
            f"np.{draw(st.sampled_from(DTYPES)).replace('bool', 'bool_')}({inner})"]))
    op = draw(st.sampled_from(BINARY))
    return f"({draw(expressions(depth=depth - 1))} {op} {draw(expressions(depth=depth - 1))})"


def _values(dtype, shape, draw):
    info = np.iinfo(dtype) if np.dtype(dtype).kind in "iu" else None
    if dtype == "bool":
        pool = [False, True]
    elif info is not None:
        pool = [info.min, info.max, 0, 1, -1 if info.min < 0 else 2, 2, 3, 7, 63, 64, info.min + 1]
    else:
        pool = [0.0, -0.0, 1.0, -1.5, 0.1, 3.0, np.inf, -np.inf, np.nan, 1e-30, 65504.0, 7.0, 1e38]
    with np.errstate(all="ignore"):
        flat = [draw(st.sampled_from(pool)) for _ in range(int(np.prod(shape)))]
        return np.array(flat).astype(dtype).reshape(shape)


def _per_element(fn, a, b):
    rows = [fn(x, y) for x, y in zip(a, b)]
    if type(rows[0]) is tuple:
        return tuple(np.stack([np.asarray(r[i]) for r in rows]) for i in range(len(rows[0])))
    return np.stack([np.asarray(r) for r in rows])


def _same_bits(x, y):
    if type(x) is tuple:
        return type(y) is tuple and len(x) == len(y) and all(map(_same_bits, x, y))
    y = np.asarray(y)
    return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_what_is_proven_gives_the_per_element_bits(data):
    _proven_gives_the_per_element_bits(data)


@pytest.mark.slow
@settings(max_examples=10_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_what_is_proven_gives_the_per_element_bits_soak(data):
    _proven_gives_the_per_element_bits(data)


def _proven_gives_the_per_element_bits(data):
    source = data.draw(expressions())
    fn = _function(source)
    da, db = data.draw(st.sampled_from(DTYPES)), data.draw(st.sampled_from(DTYPES))
    ra, rb = data.draw(st.sampled_from([0, 0, 1])), data.draw(st.sampled_from([0, 0, 1]))  # ranks per element
    try:
        prove_elementwise(fn, (Leaf(np.dtype(da), ra), Leaf(np.dtype(db), rb)))
    except NotProven:
        return
    a, b = _values(da, (6, 2)[:1 + ra], data.draw), _values(db, (6, 1)[:1 + rb], data.draw)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            expected = _per_element(fn, a, b)
        except Exception:  # noqa: BLE001 - per element it raises: the batch must raise too (and is re-run)
            with pytest.raises(Exception):
                fn(a, b)
            return
        try:
            got = fn(a, b)
        except Exception as e:  # noqa: BLE001
            pytest.fail(f"{source} on {da}, {db}: the batch raised {e!r} where every element worked")
    assert _same_bits(expected, got), (source, da, db, a, b, expected, got)


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="calls are followed on Python 3.11's bytecode only")
def test_a_ported_cast_and_normalisation_is_proven():
    def normalise(image, label):
        return np.sqrt(image.astype(np.float32) / 255.0), np.float64(label), abs(label)

    out = prove_elementwise(normalise, (Leaf(np.dtype("uint8"), 3), Leaf(np.dtype("int32"), 0)))
    assert out == (Leaf(np.dtype("float32"), 3), Leaf(np.dtype("float64"), 0), Leaf(np.dtype("int32"), 0))


def test_a_shadowed_numpy_is_not_followed():
    namespace = {"np": types.SimpleNamespace(sqrt=np.sqrt)}
    exec("def f(x):\n    return np.sqrt(x)\n", namespace)  # noqa: S102
    with pytest.raises(NotProven):
        prove_elementwise(namespace["f"], (Leaf(np.dtype("float64"), 0),))


def test_a_ported_increment_is_proven():
    assert prove_elementwise(lambda x: x + 1, (Leaf(np.dtype("int64"), 0),)) == Leaf(np.dtype("int64"), 0)


def test_locals_tuples_and_ranks_are_followed():
    def scale(image, label):
        x = image / 255.0
        return (x - 0.5) * 2.0, (label, label > 3)

    out = prove_elementwise(scale, (Leaf(np.dtype("uint8"), 3), Leaf(np.dtype("int32"), 0)))
    assert out == (Leaf(np.dtype("float64"), 3), (Leaf(np.dtype("int32"), 0), Leaf(np.dtype("bool"), 0)))


SCALAR = Leaf(np.dtype("int64"), 0)
K = 3


@pytest.mark.parametrize("fn, args, why", [
    (lambda x: x.sum(), (SCALAR,), "method|uses "),
    (lambda x: np.exp(x), (SCALAR,), "does not follow|uses "),
    (lambda x: x.astype(np.float32).astype(np.int32), (Leaf(np.dtype("int64"), 0),), "undefined|uses "),
    (lambda x: np.int8(x), (Leaf(np.dtype("float32"), 0),), "undefined|uses "),
    (lambda x: x.shape, (SCALAR,), "attribute|uses "),
    (lambda x: x + K, (SCALAR,), "uses "),
    (lambda x: x if x > 0 else -x, (SCALAR,), "uses "),
    (lambda x: [x, x + 1], (SCALAR,), "uses "),
    (lambda x: (x, 1), (SCALAR,), "constant"),
    (lambda x: 5, (SCALAR,), "constant"),
    (lambda x: x + "a", (SCALAR,), "to str"),
    (lambda x, y: x + y, (SCALAR, Leaf(np.dtype("int64"), 1)), "ranks"),
    (lambda x, y: x + y, (Leaf(np.dtype("int64"), None), Leaf(np.dtype("int64"), None)), "ranks"),
    (lambda x: x % 2.0, (Leaf(np.dtype("float32"), 0),), "floating-point"),
    (lambda x: x ** 2, (Leaf(np.dtype("float64"), 0),), "floating-point"),
    (lambda x: -x, (Leaf(np.dtype("bool"), 0),), "raises"),
    (lambda x: x + 300, (Leaf(np.dtype("uint8"), 0),), "raises"),
    (lambda x: x + 1, (Leaf(np.dtype("complex64"), 0),), "numeric leaf"),
    (lambda x: x + 1, (Leaf(np.dtype("S3"), 0),), "numeric leaf"),
    (lambda x, y=2: x + y, (SCALAR,), "positional parameters"),
    (lambda *xs: xs[0], (SCALAR,), r"\*args"),
    (np.negative, (SCALAR,), "not a plain Python function"),
])
def test_what_cannot_be_proven_is_refused_with_a_reason(fn, args, why):
    with pytest.raises(NotProven, match=why):
        prove_elementwise(fn, args)


def test_in_place_operators_are_refused():
    def bump(x):
        x += 1  # on a batch this would write into the stacked input (a view of the user's array)
        return x

    with pytest.raises(NotProven, match="uses BINARY_OP"):
        prove_elementwise(bump, (SCALAR,))


def test_a_closure_is_refused():
    k = 3
    with pytest.raises(NotProven, match="closure"):
        prove_elementwise(lambda x: x + k, (SCALAR,))


def test_a_kept_proof_is_not_used_after_a_global_it_read_is_rebound():
    namespace = {"np": np}
    exec("def f(x):\n    return np.sqrt(x)\n", namespace)  # noqa: S102
    x = (Leaf(np.dtype("float64"), 0),)
    assert prove_elementwise(namespace["f"], x) == x[0]
    assert prove_elementwise(namespace["f"], x) == x[0]  # (kept)
    namespace["np"] = types.SimpleNamespace(sqrt=np.sqrt)
    with pytest.raises(NotProven):
        prove_elementwise(namespace["f"], x)
