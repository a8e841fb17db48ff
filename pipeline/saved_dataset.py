"""``Dataset.save`` / ``Dataset.load``: a dataset written to a directory (any fsspec URL) and read back.

Layout (not tf.data's; documented in ``docs/porting.md``)::

    <path>/shard-00000.index, <path>/shard-00000.data-00000-of-00001, ...   one cache-format file pair
                                                                             per shard (iterators/cache_file.py)
    <path>/dataset_spec.json                                                 written last: a finished save

``dataset_spec.json`` holds the format version, the element spec, each shard's element count and how
elements were assigned to shards. No pickle: loading never runs code from the files.

Shards: by default element ``i`` goes to shard ``i % num_shards`` and ``load`` interleaves the shards one
element at a time, so a loaded dataset yields the saved order exactly. A ``shard_func(element) -> int``
decides the shard instead; ``load`` then interleaves shards in index order (deterministic, not the saved
order), and a ``reader_func(datasets) -> Dataset`` given to ``load`` decides the order itself, as in tf.data.
"""

from __future__ import annotations

import json
import os

import numpy as np

from . import structure
from .errors import DataLossError, InvalidArgumentError, NotFoundError
from .filesystem import url_to_fs

SPEC_FILE = "dataset_spec.json"
FORMAT = "jaxfeed.saved_dataset"
VERSION = 1
WRITE_BLOCK = 1024


def shard_prefix(path: str, k: int) -> str:
    return f"{path.rstrip('/')}/shard-{k:05d}"


def default_num_shards() -> int:
    return max(1, min(os.cpu_count() or 1, 8))


# ---------------------------------------------------------------------------------------------- specs
def spec_to_json(spec):
    """An element spec as plain JSON, leaves inline (so dict key order needs no care)."""
    if isinstance(spec, structure.TensorSpec):
        return {"tensor": {"shape": None if spec.shape is None else list(spec.shape),
                           "dtype": structure.dtype_name(spec.dtype)}}
    if isinstance(spec, structure.DatasetSpec):
        raise InvalidArgumentError("save: elements that are Datasets cannot be saved.", "save")
    if structure.is_namedtuple(spec):
        return {"namedtuple": type(spec).__name__, "fields": list(spec._fields),
                "items": [spec_to_json(x) for x in spec]}
    if isinstance(spec, tuple):
        return {"tuple": [spec_to_json(x) for x in spec]}
    if isinstance(spec, dict):
        return {"dict": [[k, spec_to_json(v)] for k, v in spec.items()]}
    raise InvalidArgumentError(f"save: cannot record an element spec part {spec!r}.", "save")


def spec_from_json(data, where: str):
    try:
        if "tensor" in data:
            t = data["tensor"]
            dtype = structure.STRING if t["dtype"] == "string" else np.dtype(t["dtype"])
            return structure.TensorSpec(t["shape"], dtype)
        if "tuple" in data:
            return tuple(spec_from_json(x, where) for x in data["tuple"])
        if "dict" in data:
            return {str(k): spec_from_json(v, where) for k, v in data["dict"]}
        if "namedtuple" in data:
            import collections

            cls = collections.namedtuple(data["namedtuple"], data["fields"])
            return cls(*(spec_from_json(x, where) for x in data["items"]))
    except (KeyError, TypeError, ValueError) as e:
        raise DataLossError(f"load: {where} has a malformed element spec ({e}).", "load") from None
    raise DataLossError(f"load: {where} has a malformed element spec.", "load")


# ---------------------------------------------------------------------------------------------- save
def save(dataset, path: str, compression=None, shard_func=None, checkpoint_args=None) -> None:
    if compression not in (None, ""):
        raise InvalidArgumentError(f"save: compression={compression!r} is not supported: shards are stored "
                                   "uncompressed, with an index for resuming reads.", "save")
    if checkpoint_args is not None:
        raise InvalidArgumentError("save: checkpoint_args is not supported; a save that stops part way leaves no "
                                   "finished save (no dataset_spec.json), and running it again starts over.",
                                   "save")
    total = dataset.cardinality()
    writer = ShardedWriter(path, dataset.element_spec, shard_func, f"save({path!r})",
                           total=total if total >= 0 else None)
    try:
        with iter(dataset) as it:
            for block in iter(lambda: it.next_many(WRITE_BLOCK), []):
                writer.write(block)
        writer.finish()
    except BaseException:
        writer.abort()
        raise


class ShardedWriter:
    """Writes elements to the shards of ``path`` and publishes them (``dataset_spec.json``) on ``finish``.
    An earlier save at ``path`` is unpublished first; ``abort`` removes what this writer made."""

    def __init__(self, path: str, element_spec, shard_func, label: str, total: int | None = None):
        from tqdm import tqdm

        self._spec_json = spec_to_json(element_spec)
        self.path, self.label, self._shard_func = path, label, shard_func
        self._fs, root = url_to_fs(path)
        self._fs.makedirs(root, exist_ok=True)
        self._spec_path = f"{root.rstrip('/')}/{SPEC_FILE}"
        if self._fs.exists(self._spec_path):
            self._fs.rm(self._spec_path)
        for old in self._fs.glob(f"{root.rstrip('/')}/shard-*"):
            self._fs.rm(old)
        self._num_shards = default_num_shards() if shard_func is None else None
        self._writers: dict = {}
        self.count = 0
        # a progress bar on a terminal only (disable=None): long saves and snapshots want one, logs do not
        self._bar = tqdm(total=total, unit="el", desc=label, disable=None, leave=False)

    def _writer(self, k: int):
        from .iterators.cache_file import CacheWriter

        w = self._writers.get(k)
        if w is None:
            w = self._writers[k] = CacheWriter(shard_prefix(self.path, k), self.label)
        return w

    def write(self, block: list) -> None:
        n = self._num_shards
        if n is not None:  # round robin: element i to shard i % n, a strided slice per shard
            for k in range(n):
                part = block[(k - self.count) % n::n]
                if part:
                    self._writer(k).write(part)
        else:
            for i, element in enumerate(block):
                self._writer(_shard_of(self._shard_func, element, self.count + i)).write([element])
        self.count += len(block)
        self._bar.update(len(block))

    def finish(self) -> None:
        shards = range(self._num_shards if self._num_shards is not None else max(self._writers, default=-1) + 1)
        for k in shards:
            self._writer(k)  # an empty shard still gets its files, so load finds every shard it names
        sizes = []
        for k in shards:
            self._writers[k].finish()
            sizes.append(len(self._writers[k].offsets) - 1)
        meta = {"format": FORMAT, "version": VERSION, "element_spec": self._spec_json, "cardinality": self.count,
                "shards": sizes, "order": "round_robin" if self._shard_func is None else "shard_func"}
        with self._fs.open(self._spec_path, "w") as f:
            json.dump(meta, f)
        self._writers = {}
        self._bar.close()

    def abort(self) -> None:
        for w in self._writers.values():
            if not w._file.closed:
                w.abort()
        self._writers = {}
        self._bar.close()


def _shard_of(shard_func, element, index: int) -> int:
    args = element if type(element) is tuple else (element,)
    value = shard_func(*args)
    arr = np.asarray(value)
    if arr.shape != () or arr.dtype.kind not in "iu":
        raise InvalidArgumentError(f"save: shard_func must return a scalar integer, got {value!r} for element "
                                   f"{index}.", "save")
    k = int(arr)
    if k < 0:
        raise InvalidArgumentError(f"save: shard_func returned a negative shard index {k} for element {index}.",
                                   "save")
    return k


# ---------------------------------------------------------------------------------------------- load
def read_meta(path: str) -> dict:
    fs, root = url_to_fs(path)
    spec_path = f"{root.rstrip('/')}/{SPEC_FILE}"
    try:
        with fs.open(spec_path, "r") as f:
            meta = json.load(f)
    except FileNotFoundError:
        raise NotFoundError(f"load: {path!r} holds no finished save (no {SPEC_FILE}).", "load") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise DataLossError(f"load: {spec_path!r} is not valid JSON ({e}).", "load") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise DataLossError(f"load: {spec_path!r} was not written by Dataset.save.", "load")
    if meta.get("version") != VERSION:
        raise DataLossError(f"load: {spec_path!r} has format version {meta.get('version')!r}; this jaxfeed "
                            f"reads version {VERSION}.", "load")
    sizes = meta.get("shards")
    if not isinstance(sizes, list) or not all(isinstance(s, int) and s >= 0 for s in sizes) or \
            meta.get("cardinality") != sum(sizes):
        raise DataLossError(f"load: {spec_path!r} has inconsistent shard sizes.", "load")
    return meta


def load(path: str, element_spec=None, compression=None, reader_func=None):
    from .nodes.assert_cardinality import AssertCardinality
    from .nodes.dataset_class import dataset_class
    from .nodes.saved_shard import SavedShard

    Dataset = dataset_class()  # this module is below pipeline/dataset.py, which calls it

    if compression not in (None, ""):
        raise InvalidArgumentError(f"load: compression={compression!r} is not supported (saves are "
                                   "uncompressed).", "load")
    meta = read_meta(path)
    spec = spec_from_json(meta["element_spec"], f"{path}/{SPEC_FILE}")
    if element_spec is not None and not _compatible(element_spec, spec):
        raise InvalidArgumentError(f"load: the given element_spec {element_spec!r} does not match the saved "
                                   f"one {spec!r}.", "load")
    shards = [Dataset(SavedShard(shard_prefix(path, k), spec, n)) for k, n in enumerate(meta["shards"])]
    if not shards:
        raise DataLossError(f"load: {path!r} has no shards.", "load")
    if reader_func is not None:
        ds = reader_func(Dataset.from_tensor_slices(np.arange(len(shards), dtype=np.int64))
                         .map(lambda k: shards[int(k)]))
    elif len(shards) == 1:
        ds = shards[0]
    else:
        ds = Dataset.from_tensor_slices(np.arange(len(shards), dtype=np.int64)).interleave(
            lambda k: shards[int(k)], cycle_length=len(shards), block_length=1)
    if reader_func is None:
        ds = Dataset(AssertCardinality(ds._node, meta["cardinality"]))
    return ds


def _compatible(given, saved) -> bool:
    if not structure.same_structure(given, saved):
        return False
    return all(g.dtype == s.dtype and (g.shape is None or s.shape is None or structure.shape_compatible(g.shape, s.shape))
               for g, s in zip(structure.flatten(given), structure.flatten(saved)))
