"""Ragged and sparse batches (``ragged_batch``, ``sparse_batch``): element leaves that are not one array.

``RaggedValue(values, row_splits)`` -- tf.RaggedTensor's row-splits form: row ``i`` is
``values[row_splits[i]:row_splits[i + 1]]``; ``len`` is the number of rows, ``value[i]`` a row (a view),
``to_list()``, ``to_sparse()``. It has the interface of ``formats.VarLenValue`` (what ``parse_example``
returns for a ``VarLenFeature``), so code written for one reads the other.

``SparseValue(indices, values, dense_shape)`` -- tf.sparse.SparseTensor's three arrays; ``to_dense()``.

Both are leaves of an element (the structure module registers them), with specs ``RaggedSpec`` /
``SparseSpec`` (TensorSpecs of the dense shape, ``None`` where rows differ). ``unbatch`` of a ragged batch
gives its rows back; batching such values again, saving them in a checkpoint or sending them to devices is
refused with an error rather than done wrongly.
"""

from __future__ import annotations

import numpy as np

from . import structure


def sparse_indices(row_splits, num_values: int) -> np.ndarray:
    """The ``(row, position)`` of every value of a row-splits batch: tf's SparseTensor indices."""
    row_splits = np.asarray(row_splits, dtype=np.int64)
    lengths = np.diff(row_splits)
    rows = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    cols = np.arange(num_values, dtype=np.int64) - np.repeat(row_splits[:-1], lengths)
    return np.stack([rows, cols], axis=1) if len(rows) else np.zeros((0, 2), dtype=np.int64)


def dense_shape(row_splits, inner=()) -> np.ndarray:
    """``[rows, longest row] + inner``: the dense shape of a row-splits batch."""
    lengths = np.diff(np.asarray(row_splits, dtype=np.int64))
    return np.array([len(lengths), int(lengths.max()) if len(lengths) else 0] + list(inner), dtype=np.int64)


class RaggedSpec(structure.TensorSpec):
    """The spec of a ``RaggedValue``: ``shape`` is (rows, None, inner...), ``dtype`` the values' dtype."""

    __slots__ = ()

    def is_compatible_with(self, value) -> bool:
        return isinstance(value, RaggedValue) and structure.dtypes_compatible(self.dtype, value.values.dtype) and \
            structure.shape_compatible(self.shape, value.shape)

    def __eq__(self, other):
        return type(other) is RaggedSpec and self.shape == other.shape and self.dtype == other.dtype

    def __hash__(self):
        return hash(("ragged", self.shape, self.dtype))

    def __repr__(self):
        return f"RaggedSpec(shape={self.shape}, dtype={structure.dtype_name(self.dtype)})"


class SparseSpec(structure.TensorSpec):
    """The spec of a ``SparseValue``: ``shape`` is its dense shape."""

    __slots__ = ()

    def is_compatible_with(self, value) -> bool:
        return isinstance(value, SparseValue) and structure.dtypes_compatible(self.dtype, value.values.dtype) and \
            structure.shape_compatible(self.shape, tuple(int(d) for d in value.dense_shape))

    def __eq__(self, other):
        return type(other) is SparseSpec and self.shape == other.shape and self.dtype == other.dtype

    def __hash__(self):
        return hash(("sparse", self.shape, self.dtype))

    def __repr__(self):
        return f"SparseSpec(shape={self.shape}, dtype={structure.dtype_name(self.dtype)})"


class RaggedValue:
    __slots__ = ("values", "row_splits")

    def __init__(self, values, row_splits):
        self.values = values
        self.row_splits = np.asarray(row_splits, dtype=np.int64)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.row_splits)

    @property
    def shape(self) -> tuple:
        return (len(self),) + (None,) + tuple(np.shape(self.values)[1:])

    @property
    def dtype(self):
        return np.asarray(self.values).dtype

    @property
    def indices(self) -> np.ndarray:
        return sparse_indices(self.row_splits, len(self.values))

    @property
    def dense_shape(self) -> np.ndarray:
        return dense_shape(self.row_splits, np.shape(self.values)[1:])

    @property
    def ndim(self) -> int:
        return np.ndim(self.values) + 1

    def __len__(self) -> int:
        return len(self.row_splits) - 1

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __getitem__(self, i):
        if isinstance(i, slice):  # rows a..b: a RaggedValue of them (what unbatch's row queue takes)
            start, stop, step = i.indices(len(self))
            if step != 1:
                raise TypeError("RaggedValue rows are sliced with step 1 only")
            stop = max(stop, start)
            splits = self.row_splits[start:stop + 1]
            return RaggedValue(self.values[splits[0]:splits[-1]], splits - splits[0])
        if not isinstance(i, (int, np.integer)):
            raise TypeError(f"RaggedValue rows are indexed by an integer or a slice, got {i!r}")
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"row {i} of a RaggedValue of {n} rows")
        i = int(i) % n
        return self.values[self.row_splits[i]:self.row_splits[i + 1]]

    def to_list(self) -> list:
        return [self[i] for i in range(len(self))]

    def to_sparse(self):
        """``(indices, values, dense_shape)``, as ``formats.VarLenValue.to_sparse`` and tf's SparseTensor."""
        return self.indices, self.values, self.dense_shape

    def spec(self, rows=None) -> RaggedSpec:
        return RaggedSpec((rows, None) + tuple(np.shape(self.values)[1:]), self.dtype)

    def __repr__(self):
        return f"RaggedValue({self.to_list()!r})"


class SparseValue:
    __slots__ = ("indices", "values", "dense_shape")

    def __init__(self, indices, values, dense_shape):
        self.indices = np.asarray(indices, dtype=np.int64)
        self.values = values
        self.dense_shape = np.asarray(dense_shape, dtype=np.int64)

    def to_dense(self, default_value=0) -> np.ndarray:
        out = np.full(tuple(self.dense_shape), default_value, dtype=np.asarray(self.values).dtype)
        if len(self.indices):
            out[tuple(self.indices.T)] = self.values
        return out

    def __len__(self) -> int:
        return int(self.dense_shape[0])

    def __getitem__(self, i):
        raise TypeError("a SparseValue has no rows to take apart (unbatch): use .to_dense() first")

    def spec(self, rows=None) -> SparseSpec:
        return SparseSpec((rows,) + tuple(int(d) for d in self.dense_shape[1:]), np.asarray(self.values).dtype)

    def __repr__(self):
        return (f"SparseValue(indices={self.indices.tolist()}, values={np.asarray(self.values).tolist()}, "
                f"dense_shape={self.dense_shape.tolist()})")


structure.register_composite(RaggedValue)
structure.register_composite(SparseValue)
