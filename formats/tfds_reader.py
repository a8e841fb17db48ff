"""Datasets prepared by ``tensorflow_datasets``, read without TensorFlow: ``tfds(name, split=..., data_dir=...)``.

A prepared dataset is a directory ``<data_dir>/<name>[/<config>]/<version>/`` holding ``dataset_info.json``
(file format, splits with their shard lengths), ``features.json`` (how each feature is encoded) and the
shards (TFRecord files of ``tf.train.Example``, or ArrayRecord files of the same records). We read the
shards the split asks for, in file order (TFDS's ``shuffle_files=False`` order), and decode each feature
as TFDS does: images to uint8 arrays (``jaxfeed.ops``), class labels to int64, text to bytes, tensors to
their dtype and shape, sequences to arrays with a leading length dimension, nested dicts as dicts.

Splits take TFDS's slicing syntax: ``"train"``, ``"train[:10%]"``, ``"train[5:9]"``, ``"train[-30%:]"``,
``"train+test"``, ``"train[:50%]+test[10:]"``; percentages round to the closest example as TFDS's default
does. Shard lengths come from ``dataset_info.json``, so a slice opens only the shards it needs and skips
within them (ArrayRecord shards jump straight to the record). The cardinality is the slice's length.
"""

from __future__ import annotations

import json
import os
import re

import numpy as np

from jaxfeed.pipeline.dataset import Dataset
from jaxfeed.pipeline.errors import InvalidArgumentError, NotFoundError, UnimplementedError
from jaxfeed.pipeline.nodes.assert_cardinality import AssertCardinality

from . import fs
from .example import FixedLenFeature, VarLenFeature, parse_single_example
from .tfrecord_dataset import TFRecordDataset

_EXTENSIONS = {"tfrecord": "tfrecord", "array_record": "array_record"}
_SLICE = re.compile(r"^\s*([\w\-]+)\s*(?:\[\s*(-?\d+%?)?\s*:\s*(-?\d+%?)?\s*\])?\s*$")


def tfds(name: str, split: str = "train", data_dir=None, as_supervised: bool = False, shuffle_files: bool = False,
         seed=None, skip_decoding=()) -> Dataset:
    """The examples of ``split`` of the prepared dataset ``name`` (``"mnist"``, ``"mnist:3.0.1"``,
    ``"c4/en:3.0.1"``) under ``data_dir`` (default ``$TFDS_DATA_DIR`` or ``~/tensorflow_datasets``).

    ``as_supervised`` yields ``(input, target)`` by the dataset's supervised keys; ``shuffle_files``
    reads the shard pieces in an order shuffled under ``seed``; ``skip_decoding`` names features left
    encoded (images as bytes, for a decode of your own)."""
    directory = find_directory(name, data_dir)
    info = _read_json(directory, "dataset_info.json")
    features = _read_json(directory, "features.json")
    decoder = FeatureDecoder(features, set(skip_decoding))
    file_format = info.get("fileFormat", "tfrecord")
    if file_format not in _EXTENSIONS:
        raise UnimplementedError(f"tfds: {directory} is stored as {file_format!r}; jaxfeed reads tfrecord and "
                                 "array_record.", "tfds")
    splits = {s["name"]: s for s in info.get("splits", [])}
    pieces = []  # (file, start, stop) in reading order
    for split_name, lo, hi in parse_split(split):
        if split_name not in splits:
            raise InvalidArgumentError(f"tfds: {info.get('name', name)} has no split {split_name!r}; it has "
                                       f"{sorted(splits)}.", "tfds")
        pieces += _split_pieces(directory, info, splits[split_name], file_format, lo, hi)
    total = sum(stop - start for _, start, stop in pieces)
    if not pieces:
        raise InvalidArgumentError(f"tfds: the split {split!r} selects no examples.", "tfds")
    order = np.arange(len(pieces))
    if shuffle_files:
        order = np.random.default_rng(seed).permutation(len(pieces))
    records = None
    for k in order.tolist():
        part = _read_piece(*pieces[k], file_format)
        records = part if records is None else records.concatenate(part)
    ds = records.map(decoder)
    if as_supervised:
        keys = _supervised_keys(info, name)
        ds = ds.map(lambda example: tuple(example[k] for k in keys))
    return Dataset(AssertCardinality(ds._node, total))


# ---------------------------------------------------------------------------------------------- location
def find_directory(name: str, data_dir=None) -> str:
    base, _, version = name.partition(":")
    root = data_dir or os.environ.get("TFDS_DATA_DIR") or os.path.join(os.path.expanduser("~"), "tensorflow_datasets")
    root = fs.as_path(root)
    folder = os.path.join(root, *base.split("/"))
    if version:
        candidates = [version]
    else:
        try:
            candidates = sorted((v for v in os.listdir(folder) if re.fullmatch(r"\d+\.\d+\.\d+", v)),
                                key=lambda v: tuple(map(int, v.split("."))), reverse=True)
        except FileNotFoundError:
            candidates = []
    for v in candidates:
        path = os.path.join(folder, v)
        if os.path.exists(os.path.join(path, "dataset_info.json")):
            return path
    raise NotFoundError(f"tfds: no prepared dataset {name!r} under {root} (looked for "
                        f"{os.path.join(folder, version or '<version>', 'dataset_info.json')}).", "tfds")


def _read_json(directory, filename):
    path = os.path.join(directory, filename)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise NotFoundError(f"tfds: {path} is missing.", "tfds") from None
    except ValueError as e:
        raise InvalidArgumentError(f"tfds: {path} is not valid JSON: {e}", "tfds") from None


# ---------------------------------------------------------------------------------------------- splits
def parse_split(split: str) -> list[tuple[str, str | None, str | None]]:
    """``"train[:10%]+test"`` -> ``[("train", None, "10%"), ("test", None, None)]``."""
    out = []
    for part in split.split("+"):
        m = _SLICE.match(part)
        if not m:
            raise InvalidArgumentError(f"tfds: cannot parse the split {split!r} (at {part!r}).", "tfds")
        out.append((m.group(1), m.group(2), m.group(3)))
    return out


def _boundary(value: str | None, n: int, default: int) -> int:
    if value is None:
        return default
    if value.endswith("%"):
        pct = int(value[:-1])
        if not -100 <= pct <= 100:
            raise InvalidArgumentError(f"tfds: percent slice boundaries must be within [-100, 100], got {value}.",
                                       "tfds")
        k = int(round(pct * n / 100.0))  # TFDS's default rounding ("closest", Python's round)
    else:
        k = int(value)
    if k < 0:
        k += n
    return min(max(k, 0), n)


def _split_pieces(directory, info, split_info, file_format, lo, hi):
    lengths = [int(x) for x in split_info.get("shardLengths", [])]
    n = sum(lengths)
    start, stop = _boundary(lo, n, 0), _boundary(hi, n, n)
    template = split_info.get("filepathTemplate", "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}")
    pieces, offset = [], 0
    for k, length in enumerate(lengths):
        a, b = max(start - offset, 0), min(stop - offset, length)
        if a < b:
            filename = (template.replace("{DATASET}", info["name"]).replace("{SPLIT}", split_info["name"])
                        .replace("{FILEFORMAT}", _EXTENSIONS[file_format])
                        .replace("{SHARD_X_OF_Y}", f"{k:05d}-of-{len(lengths):05d}")
                        .replace("{SHARD_INDEX}", f"{k:05d}").replace("{NUM_SHARDS}", f"{len(lengths):05d}"))
            pieces.append((os.path.join(directory, filename), a, b))
        offset += length
    return pieces


def _read_piece(path, start, stop, file_format) -> Dataset:
    if file_format == "array_record":
        from .array_record import ArrayRecordDataset

        return ArrayRecordDataset(path).skip(start).take(stop - start)
    return TFRecordDataset(path).skip(start).take(stop - start)


def _supervised_keys(info, name):
    keys = info.get("supervisedKeys", {})
    items = keys.get("tuple", {}).get("items") or [keys.get("input"), keys.get("output")]
    names = [i.get("featureKey") if isinstance(i, dict) else i for i in items]
    if not names or any(not isinstance(k, str) for k in names):
        raise InvalidArgumentError(f"tfds: {name} has no supervised keys (as_supervised=True needs them).", "tfds")
    return names


# ---------------------------------------------------------------------------------------------- features
_CLASS = "pythonClassName"


class FeatureDecoder:
    """Decodes one serialized example by a ``features.json`` (a picklable function for ``map``)."""

    def __init__(self, features_json: dict, skip: set):
        self.tree = _feature_tree(features_json, "")
        self.skip = skip
        self.parse_spec = {}
        self._collect(self.tree)

    def _collect(self, node):
        kind = node["kind"]
        if kind == "dict":
            for child in node["items"].values():
                self._collect(child)
        elif kind == "sequence":
            self._collect_sequence(node["feature"])
        else:
            scalar = kind in ("image", "text", "label") or (kind == "tensor" and node["shape"] == ())
            parse_dtype = np.dtype(object) if node["parse"] == "bytes" else np.dtype(node["parse"])
            self.parse_spec[node["key"]] = FixedLenFeature([], parse_dtype) if scalar else VarLenFeature(parse_dtype)

    def _collect_sequence(self, node):
        if node["kind"] == "dict":
            for child in node["items"].values():
                self._collect_sequence(child)
        elif node["kind"] == "sequence":
            raise UnimplementedError(f"tfds: nested sequences ({node['key']}) are not supported.", "tfds")
        else:
            parse_dtype = np.dtype(object) if node["parse"] == "bytes" else np.dtype(node["parse"])
            self.parse_spec[node["key"]] = VarLenFeature(parse_dtype)

    def __call__(self, record):
        parsed = parse_single_example(record, self.parse_spec)
        return self._decode(self.tree, parsed, sequence=False)

    def _decode(self, node, parsed, sequence):
        kind = node["kind"]
        if kind == "dict":
            return {name: self._decode(child, parsed, sequence) for name, child in node["items"].items()}
        if kind == "sequence":
            return self._decode(node["feature"], parsed, True)
        value = parsed[node["key"]]
        if kind == "image":
            if node["key"] in self.skip:
                return value
            if sequence:
                return np.stack([_decode_image(v, node) for v in value]) if len(value) else \
                    np.zeros((0,) + tuple(d if d is not None else 0 for d in node["shape"]), np.uint8)
            return _decode_image(value, node)
        if kind in ("text", "label"):
            return value if not sequence else np.asarray(value)
        # tensor
        dtype = node["dtype"]
        if node["encoding"] != "none":
            raise UnimplementedError(f"tfds: tensor feature {node['key']} uses encoding {node['encoding']!r}.", "tfds")
        arr = np.asarray(value)
        arr = arr.astype(dtype) if dtype != np.dtype(object) else arr
        shape = node["shape"]
        lead = (-1,) if sequence else ()
        if not sequence and shape == ():
            return arr.reshape(()) if arr.ndim else arr
        return arr.reshape(lead + tuple(-1 if d is None else d for d in shape))


def _decode_image(data, node):
    from .image import decode_image

    channels = node["shape"][-1] if node["shape"] and node["shape"][-1] is not None else 0
    return decode_image(data, channels=channels, dtype=node["dtype"])


def _feature_tree(spec: dict, key: str) -> dict:
    """A plain description of a features.json node: kind, the flat Example key, dtypes and shape."""
    if "featuresDict" in spec:
        items = spec["featuresDict"]["features"]
        return {"kind": "dict", "items": {k: _feature_tree(v, f"{key}/{k}" if key else k) for k, v in items.items()}}
    if "sequence" in spec:
        length = int(spec["sequence"].get("length", -1))
        if length not in (-1, 0) and length is not None:
            pass  # a fixed length only checks the data; the values decode the same
        return {"kind": "sequence", "feature": _feature_tree(spec["sequence"]["feature"], key)}
    if "image" in spec:
        img = spec["image"]
        dtype = np.dtype(img.get("dtype", "uint8"))
        if dtype != np.uint8:
            raise UnimplementedError(f"tfds: image feature {key} has dtype {dtype}; jaxfeed decodes uint8 images.",
                                     "tfds")
        return {"kind": "image", "key": key, "parse": "bytes", "dtype": dtype,
                "shape": _shape(img.get("shape", {}))}
    if "classLabel" in spec:
        return {"kind": "label", "key": key, "parse": "int64"}
    if "text" in spec:
        return {"kind": "text", "key": key, "parse": "bytes"}
    if "tensor" in spec:
        t = spec["tensor"]
        dtype = np.dtype(object) if t["dtype"] == "string" else np.dtype(t["dtype"])
        parse = "bytes" if dtype == object else ("float32" if dtype.kind == "f" else "int64")
        shape = _shape(t.get("shape", {}))
        if sum(d is None for d in shape) > 1:
            raise UnimplementedError(f"tfds: tensor feature {key} has more than one unknown dimension {shape}.",
                                     "tfds")
        return {"kind": "tensor", "key": key, "parse": parse, "dtype": dtype, "shape": shape,
                "encoding": t.get("encoding", "none")}
    raise UnimplementedError(f"tfds: feature {key!r} of type {spec.get(_CLASS, '?')} is not supported.", "tfds")


def _shape(shape_json) -> tuple:
    return tuple(None if int(d) < 0 else int(d) for d in shape_json.get("dimensions", []))


__all__ = ["FeatureDecoder", "find_directory", "parse_split", "tfds"]
