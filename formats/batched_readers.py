"""tf.data.experimental's ready-made input functions: ``make_csv_dataset`` (with column type inference) and
``make_batched_features_dataset`` (TFRecord files of ``tf.train.Example`` -> batches of feature dicts).

Both are graphs of ordinary nodes (list files -> interleave readers -> repeat -> shuffle -> batch -> parse),
built in TensorFlow's order, so sharding, checkpoints and determinism work on them as on any pipeline.
"""

from __future__ import annotations

import csv
import io

import numpy as np

from jaxfeed.pipeline.dataset import AUTOTUNE, Dataset
from jaxfeed.pipeline.errors import InvalidArgumentError

from . import fs
from .csv import CsvDataset
from .example import parse_example
from .tfrecord_dataset import TFRecordDataset

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
# TF's inference tries the least permissive type first and never goes back to a narrower one.
_INFERENCE_ORDER = ("int32", "int64", "float32", "float64", "string")


def _fits(value: str, kind: str) -> bool:
    if kind in ("int32", "int64"):
        try:
            n = int(value, 10)
        except ValueError:
            return False
        low, high = _INT32 if kind == "int32" else _INT64
        return low <= n <= high
    if kind in ("float32", "float64"):
        try:
            with np.errstate(over="ignore"):
                return bool(np.abs(np.dtype(kind).type(value)) < np.inf)
        except ValueError:
            return False
    return True


def infer_column_types(rows: list[list[str]], num_columns: int, na_value: str) -> list[str]:
    """TF's ``_infer_column_defaults``: per column, the narrowest of int32, int64, float32, float64, string
    that every non-empty field fits, given the types earlier rows forced; an all-empty column is a string."""
    types: list[str | None] = [None] * num_columns
    for row in rows:
        for i, value in enumerate(row[:num_columns]):
            if value in ("", na_value):
                continue
            start = 0 if types[i] is None else _INFERENCE_ORDER.index(types[i])
            types[i] = next(k for k in _INFERENCE_ORDER[start:] if _fits(value, k))
    return [t or "string" for t in types]


def _rows(filename: str, count: int, field_delim: str, use_quote_delim: bool, compression: str):
    stream = fs.open_stream(filename, compression)
    try:
        text = io.TextIOWrapper(io.BufferedReader(_Readable(stream)), encoding="utf-8", newline="")
        reader = csv.reader(text, delimiter=field_delim, quoting=csv.QUOTE_MINIMAL if use_quote_delim
                            else csv.QUOTE_NONE)
        rows = []
        for row in reader:
            rows.append(row)
            if len(rows) >= count:
                break
        return rows
    finally:
        stream.close()


class _Readable(io.RawIOBase):
    """``io.BufferedReader`` over our block streams (which only have ``read``)."""

    def __init__(self, stream):
        self._stream = stream

    def readable(self):
        return True

    def readinto(self, buffer):
        data = self._stream.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)


def _file_names(file_pattern) -> list[str]:
    names = fs.glob(file_pattern)
    if not names:
        raise InvalidArgumentError(f"No files match `file_pattern` {file_pattern!r}.", "make_csv_dataset")
    return names


def make_csv_dataset(file_pattern, batch_size, column_names=None, column_defaults=None, label_name=None,
                     select_columns=None, field_delim=",", use_quote_delim=True, na_value="", header=True,
                     num_epochs=None, shuffle=True, shuffle_buffer_size=10000, shuffle_seed=None,
                     prefetch_buffer_size=None, num_parallel_reads=None, sloppy=False, num_rows_for_inference=100,
                     compression_type=None, ignore_errors=False, encoding="utf-8"):
    """``tf.data.experimental.make_csv_dataset``: batches of ``(features, label)`` (or ``features`` alone
    without ``label_name``), ``features`` a dict from column name to a batch of values, in column order.

    Column types come from ``column_defaults`` or are inferred from the first ``num_rows_for_inference``
    rows of the first file, as TF does (int32, int64, float32, float64 or string; an empty field takes 0 or
    b"" then). ``sloppy`` is accepted and ignored: the order is always deterministic."""
    what = "make_csv_dataset"
    if encoding.replace("-", "").lower() != "utf8":
        raise ValueError(f"{what}: only UTF-8 files are supported, got encoding={encoding!r}.")
    compression = fs.check_compression(compression_type, what)
    names = _file_names(file_pattern)
    if column_names is None:
        if not header:
            raise ValueError(f"{what}: Cannot infer column names without a header line.")
        head = _rows(names[0], 1, field_delim, use_quote_delim, compression)
        if not head:
            raise ValueError(f"{what}: {names[0]} is empty; it has no header line to name the columns.")
        column_names = head[0]
    column_names = list(column_names)
    if len(set(column_names)) != len(column_names):
        raise ValueError(f"{what}: Cannot have duplicate column names: {column_names}")
    select = _selected_indices(select_columns, column_names, what)
    if label_name is not None and label_name not in [column_names[i] for i in select]:
        raise ValueError(f"{what}: `label_name` {label_name!r} is not a selected column: "
                         f"{[column_names[i] for i in select]}")
    if column_defaults is None:
        body = []
        for name in names:  # TF reads rows for inference across the files, in order
            if len(body) >= num_rows_for_inference:
                break
            rows = _rows(name, (1 if header else 0) + num_rows_for_inference - len(body), field_delim,
                         use_quote_delim, compression)
            body += rows[1:] if header else rows
        types = infer_column_types(body, len(column_names), na_value)
        column_defaults = [b"" if types[i] == "string" else np.dtype(types[i]).type(0) for i in select]
    elif len(column_defaults) != len(select):
        raise ValueError(f"{what}: `column_defaults` has {len(column_defaults)} entries for {len(select)} "
                         "selected columns.")
    selected_names = [column_names[i] for i in select]

    files = Dataset.from_tensor_slices(np.array(names + [""], dtype=object)[:-1])
    if shuffle:
        files = files.shuffle(len(names), seed=shuffle_seed)

    def read(filename):
        return CsvDataset(filename, column_defaults, compression_type=compression, header=header,
                          field_delim=field_delim, use_quote_delim=use_quote_delim, na_value=na_value,
                          select_cols=select)

    cycle = 1 if num_parallel_reads is None else num_parallel_reads
    ds = files.interleave(read, cycle_length=cycle, num_parallel_calls=None if cycle == 1 else cycle)
    if ignore_errors:
        ds = ds.ignore_errors()
    if num_epochs != 1:
        ds = ds.repeat(num_epochs)
    if shuffle:
        ds = ds.shuffle(shuffle_buffer_size, seed=shuffle_seed)
    ds = ds.batch(batch_size, drop_remainder=num_epochs is None)

    def to_features(*columns):
        features = dict(zip(selected_names, columns))
        if label_name is None:
            return features
        label = features.pop(label_name)
        return features, label

    ds = ds.map(to_features)
    return ds.prefetch(AUTOTUNE if prefetch_buffer_size is None else prefetch_buffer_size)


def _selected_indices(select_columns, column_names, what):
    if select_columns is None:
        return list(range(len(column_names)))
    select = list(select_columns)
    if all(isinstance(c, (int, np.integer)) and not isinstance(c, bool) for c in select):
        indices = [int(c) for c in select]
        bad = [i for i in indices if not 0 <= i < len(column_names)]
        if bad:
            raise ValueError(f"{what}: column indices {bad} are out of range for {len(column_names)} columns.")
    elif all(isinstance(c, str) for c in select):
        missing = [c for c in select if c not in column_names]
        if missing:
            raise ValueError(f"{what}: `select_columns` names {missing} are not columns: {column_names}")
        indices = [column_names.index(c) for c in select]
    else:
        raise ValueError(f"{what}: `select_columns` must be all integers or all strings, got {select!r}")
    return sorted(set(indices))


def make_batched_features_dataset(file_pattern, batch_size, features, reader=None, label_key=None,
                                  reader_args=None, num_epochs=None, shuffle=True, shuffle_buffer_size=10000,
                                  shuffle_seed=None, prefetch_buffer_size=None, reader_num_threads=None,
                                  parser_num_threads=None, sloppy_ordering=False, drop_final_batch=False):
    """``tf.data.experimental.make_batched_features_dataset``: files of serialized ``tf.train.Example``
    (``reader``, default ``TFRecordDataset``) -> batches parsed with ``features`` (a dict of
    ``FixedLenFeature``/``VarLenFeature``...), as ``features`` or ``(features, label)`` with ``label_key``.
    ``sloppy_ordering`` is accepted and ignored: the order is always deterministic (sloppy only permits
    reordering)."""
    what = "make_batched_features_dataset"
    reader = TFRecordDataset if reader is None else reader
    reader_args = list(reader_args or [])
    if label_key is not None and label_key not in features:
        raise ValueError(f"{what}: The `label_key` provided ({label_key!r}) must be one of the `features` keys.")
    files = Dataset.list_files(file_pattern, shuffle=shuffle, seed=shuffle_seed)
    cycle = 1 if reader_num_threads is None else reader_num_threads
    ds = files.interleave(lambda f: reader(f, *reader_args), cycle_length=cycle,
                          num_parallel_calls=None if cycle == 1 else cycle)
    if num_epochs != 1:
        ds = ds.repeat(num_epochs)
    if shuffle:
        ds = ds.shuffle(shuffle_buffer_size, seed=shuffle_seed)
    ds = ds.batch(batch_size, drop_remainder=drop_final_batch)

    def parse(serialized):
        parsed = parse_example(serialized, features)
        if label_key is None:
            return parsed
        label = parsed.pop(label_key)
        return parsed, label

    ds = ds.map(parse, num_parallel_calls=parser_num_threads)
    return ds.prefetch(AUTOTUNE if prefetch_buffer_size is None else prefetch_buffer_size)


__all__ = ["infer_column_types", "make_batched_features_dataset", "make_csv_dataset"]
