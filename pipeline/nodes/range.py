"""``Dataset.range``: Python ``range`` semantics, random-access."""

from __future__ import annotations

import numbers

import numpy as np

from ..errors import InvalidArgumentError
from ..structure import TensorSpec
from .base import INFINITE, Node


class Range(Node):
    kind = "Range"
    is_source = True

    def __init__(self, *args, output_type=np.int64):
        if not args:
            raise ValueError("Dataset.range: expected 1 to 3 arguments (start, stop, step), got none.")
        if len(args) > 3:
            raise ValueError(f"Dataset.range: expected 1 to 3 arguments, got {len(args)}.")
        for a in args:
            if a is None:  # tf.data converts the arguments to tensors: None is a ValueError there
                raise ValueError("Dataset.range: arguments must be integers, got None.")
            if isinstance(a, bool) or not isinstance(a, (numbers.Integral, np.integer)):
                raise TypeError(f"Dataset.range: arguments must be integers, got {a!r} ({type(a).__name__}).")
        start, stop, step = (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) == 3 else 1)
        if step == 0:
            raise InvalidArgumentError("Dataset.range: step must be a non-zero integer.", "Range")
        super().__init__()
        self.start, self.stop, self.step = int(start), int(stop), int(step)
        self.dtype = np.dtype(output_type)
        self._wraps = self.dtype.kind == "u" or (self.dtype.kind == "i" and self.dtype.itemsize < 8)
        self._len = max(0, -((self.start - self.stop) // self.step))  # len(range()) overflows past 2**63

    def params(self):
        return {"start": self.start, "stop": self.stop, "step": self.step, "output_type": self.dtype.name}

    def compute_spec(self):
        return TensorSpec((), self.dtype)

    def cardinality(self):
        return self._len

    def random_access(self):
        return True

    def length(self):
        return self._len

    def gather(self, indices):
        indices = np.asarray(indices, dtype=np.int64)
        values = indices + self.start if self.step == 1 else self.start + self.step * indices  # a new array
        return values.astype(self.dtype, copy=False)

    def element_at(self, index):
        if self._wraps:  # computed in int64 and cast, as tf.data does and ``gather`` does: a narrower or unsigned
            # integer output_type wraps around (range(-1, 2, output_type=uint8): 255, 0, 1; the scalar type raised)
            return np.int64(self.start + self.step * int(index)).astype(self.dtype)
        return self.dtype.type(self.start + self.step * int(index))


_INT64_MIN, _INT64_MAX = int(np.iinfo(np.int64).min), int(np.iinfo(np.int64).max)


class Counter(Range):
    """``Dataset.counter``: ``start + step * i`` for ever (tf.data's counter: any step, 0 included, and
    INFINITE cardinality). Random access reaches as far as int64 does; the values are computed in int64
    and cast to the output type, so a narrower type wraps around as tf.data's does."""

    kind = "Counter"

    def __init__(self, start=0, step=1, output_type=np.int64):
        for name, a in (("start", start), ("step", step)):
            if a is None:
                raise ValueError(f"Dataset.counter: `{name}` must be an integer, got None.")
            if isinstance(a, bool) or not isinstance(a, (numbers.Integral, np.integer)):
                raise TypeError(f"Dataset.counter: `{name}` must be an integer, got {a!r} ({type(a).__name__}).")
        Node.__init__(self)
        self.start, self.step = int(start), int(step)
        self.stop = None
        self.dtype = np.dtype(output_type)
        if self.step > 0:
            reach = (_INT64_MAX - self.start) // self.step + 1
        elif self.step < 0:
            reach = (self.start - _INT64_MIN) // -self.step + 1
        else:
            reach = _INT64_MAX
        self._len = min(reach, _INT64_MAX)  # the positions an index can address, not a cardinality

    def params(self):
        return {"start": self.start, "step": self.step, "output_type": self.dtype.name}

    def cardinality(self):
        return INFINITE

    def element_at(self, index):
        return self.gather(np.asarray([index], dtype=np.int64))[0]
