"""The jaxfeed side of the conformance cases: the adapter ``t`` the case functions receive, and the
conversion of jaxfeed elements and specs to the golden encoding (``golden_format``).

The ops below are what the recorder's ``TFOps`` are in TensorFlow, written with numpy: Python scalars
given to them are converted as TensorFlow converts them (``fill([n], 0.5)`` is float32), so a case body
means the same on both sides.
"""

from __future__ import annotations

import numpy as np

from jaxfeed import formats
from jaxfeed.pipeline import AUTOTUNE, INFINITE_CARDINALITY, UNKNOWN_CARDINALITY, Dataset, errors
from jaxfeed.pipeline.structure import STRING, DatasetSpec, TensorSpec, to_array

import golden_format as gf


def _dtype(name):
    return STRING if name in ("string", str, bytes) else np.dtype(name)


class NumpyOps:
    @staticmethod
    def fill(shape, value):
        value = to_array(value)
        return np.full([int(d) for d in shape], value, dtype=np.asarray(value).dtype)

    @staticmethod
    def zeros(n, dtype):
        return np.zeros(int(n), _dtype(dtype))

    @staticmethod
    def cast(x, dtype):
        return np.asarray(x).astype(_dtype(dtype))[()]

    @staticmethod
    def shape0(x):
        return np.int32(np.shape(x)[0])

    @staticmethod
    def size(x):
        return np.int32(np.size(x))

    @staticmethod
    def size_bytes(s):
        return np.int32(len(s))

    @staticmethod
    def arange(n):
        return np.arange(n)

    @staticmethod
    def reduce_sum(x):
        return np.sum(x)[()]

    @staticmethod
    def stack(values):
        return np.stack([np.asarray(to_array(v)) for v in values])

    @staticmethod
    def py_raise(x, bad):
        if x == bad:
            raise ValueError(f"bad element {x}")
        return x


def _missing(name):
    def build(*args, **kwargs):
        raise NotImplementedError(f"jaxfeed has no {name}")

    return build


def _fixed_length():
    try:
        from jaxfeed.formats.fixed_length import FixedLengthRecordDataset
    except ImportError:
        return _missing("FixedLengthRecordDataset")
    return FixedLengthRecordDataset


class JaxfeedAdapter:
    def __init__(self, files, scratch=None):
        import tempfile

        from jaxfeed.data import experimental

        self.Dataset = Dataset
        self.TFRecordDataset = formats.TFRecordDataset
        self.TextLineDataset = formats.TextLineDataset
        self.FixedLengthRecordDataset = _fixed_length()
        self.CsvDataset = formats.CsvDataset
        self.AUTOTUNE = AUTOTUNE
        self.INFINITE = INFINITE_CARDINALITY
        self.UNKNOWN = UNKNOWN_CARDINALITY
        self.ops = NumpyOps
        self.files = files
        self.experimental = experimental
        self._scratch = scratch or tempfile.mkdtemp(prefix="conformance_scratch_")
        self._made = 0

    def scratch(self):
        import os

        self._made += 1
        path = os.path.join(self._scratch, f"scratch{self._made}")
        os.makedirs(path)
        return path

    @staticmethod
    def dtype(name):
        return _dtype(name)

    @staticmethod
    def spec(shape, dtype):
        return TensorSpec(shape, _dtype(dtype))


# ------------------------------------------------------------------------------------------- encoding
def to_numpy(x, limit):
    if isinstance(x, Dataset):
        out = []
        with iter(x) as it:
            while len(out) < limit:
                block = it.next_many(limit - len(out))
                if not block:
                    break
                out.extend(block)
        return gf.DatasetValue([to_numpy(e, limit) for e in out])
    if gf.is_namedtuple(x):
        return type(x)(*[to_numpy(v, limit) for v in x])
    if isinstance(x, tuple):
        return tuple(to_numpy(v, limit) for v in x)
    if isinstance(x, dict):
        return {k: to_numpy(v, limit) for k, v in x.items()}
    return x


def encode_spec_leaf(spec):
    if isinstance(spec, TensorSpec):
        return {"t": "tensor", "shape": None if spec.shape is None else list(spec.shape),
                "dtype": gf.dtype_name(spec.dtype)}
    if isinstance(spec, DatasetSpec):
        return {"t": "dataset_spec", "spec": gf.encode_nest(spec.element_spec, encode_spec_leaf)}
    return {"t": "other", "repr": repr(spec)}


def expected_class(name: str):
    """The class a golden's error name stands for: jaxfeed.pipeline.errors.X for tf.errors.X (each also a
    subclass of the matching built-in), else the built-in itself."""
    import builtins

    klass = getattr(errors, name, None) or getattr(builtins, name, None)
    if klass is None:
        raise LookupError(f"no class for golden error {name}")
    return klass
