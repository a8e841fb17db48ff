"""Saving and restoring iterator state: a versioned, self-describing file format and helpers around it.

    from jaxfeed.pipeline import checkpoint
    checkpoint.save(it, "gs://bucket/run/step_1000.jxstate")   # any fsspec URL; atomic where possible
    it = checkpoint.restore(make_dataset(), "gs://bucket/run/step_1000.jxstate")

    mgr = checkpoint.CheckpointManager("/ckpt", max_to_keep=3)  # next to the model's step directories
    mgr.save(step, it)
    it = mgr.restore(mgr.latest_step(), make_dataset())

File layout (all integers little-endian)::

    b"JXFSTATE" | format version u32 | header length u64 | blob length u64 | header | blobs | crc32c u32

The header is UTF-8 JSON: ``{"meta": {...}, "tree": <value>, "blobs": [[offset, length], ...]}``. The
tree holds Python values (None, bool, int, float, str, lists, str-keyed dicts) as JSON; everything else is
a tagged object ``{"$t": tag, ...}``: tuples, namedtuples (stored as a tuple plus their module, name and
fields), other dicts, numpy arrays and scalars (dtype, shape, a blob), bytes (a blob), lists of elements
with one structure (stacked per leaf: a shuffle buffer of 10,000 elements is a few arrays, not 10,000
objects) and ``blocks.Failure`` entries (the error's type name and text). The digest is the CRC32C
(4 bytes) of everything before it. Nothing is pickled: reading a state never runs code.

Errors: a file that is not a state, or of an unknown format version -> ``InvalidArgumentError``; a
truncated, corrupted or malformed one (every header field is validated, see ``state_reader``) ->
``DataLossError``; a state from another pipeline -> the iterator's
``FailedPreconditionError`` naming the first differing node. A missing file -> ``NotFoundError``.
"""

from __future__ import annotations

import json
import logging
import operator
import os
import struct
import sys
import uuid

import numpy as np

from . import structure
from .errors import DataLossError, FailedPreconditionError, InvalidArgumentError, NotFoundError
from .engine.blocks import Failure
from .state_reader import MAX_DEPTH, Reader, blob_index

log = logging.getLogger("jaxfeed")

MAGIC = b"JXFSTATE"
FORMAT_VERSION = 1
_PREFIX = struct.Struct("<8sIQQ")
_DIGEST = 4
_TAG = "$t"
_STACK_MIN = 8  # lists of at least this many same-structure elements are stored stacked per leaf


# =============================================================================================== encoding
def _path(p) -> str:
    """A lazily built path (nested ``(parent, key)`` pairs) as text, for error messages only."""
    keys = []
    while isinstance(p, tuple):
        p, key = p
        keys.append(key)
    return str(p) + "".join(reversed(keys))


_dtype_of = operator.attrgetter("dtype")


class _Writer:
    def __init__(self):
        self.blobs: list = []
        self.index: list[list[int]] = []
        self.size = 0

    def blob(self, data) -> int:
        if isinstance(data, np.ndarray):
            data = memoryview(np.ascontiguousarray(data)).cast("B") if data.size else b""
        n = len(data)
        self.index.append([self.size, n])
        self.blobs.append(data)
        self.size += n
        return len(self.index) - 1

    def encode(self, v, path, depth=0):
        """``depth`` counts nesting exactly as the reader does (``state_reader.MAX_DEPTH`` bounds both)."""
        t = type(v)
        if v is None or t is bool or t is str or t is int or t is float:
            return v
        if t is list:
            if all(type(x) in _JSON_SCALARS for x in v):
                return list(v)
            self._check_depth(depth, path)
            if len(v) >= _STACK_MIN and all(type(x) is bytes for x in v):  # a buffer of records or lines
                return {_TAG: "byteslist", "lengths": list(map(len, v)), "b": self.blob(b"".join(v))}
            stacked = self._stacked(v, path, depth)
            if stacked is not None:
                return stacked
            return [self.encode(x, (path, f"[{i}]"), depth + 1) for i, x in enumerate(v)]
        if t is dict:
            self._check_depth(depth, path)
            if all(type(k) is str for k in v) and _TAG not in v:
                return {k: self.encode(x, (path, f"[{k!r}]"), depth + 1) for k, x in v.items()}
            return {_TAG: "dict", "items": [[self.encode(k, (path, ".key"), depth + 1),
                                             self.encode(x, (path, f"[{k!r}]"), depth + 1)] for k, x in v.items()]}
        if t is tuple:
            self._check_depth(depth, path)
            return {_TAG: "tuple", "v": [self.encode(x, (path, f"[{i}]"), depth + 1) for i, x in enumerate(v)]}
        if isinstance(v, np.ndarray):
            if v.dtype == object:
                self._check_depth(depth, path)
            return self._array(v, path, depth + 1)
        if structure.is_namedtuple(v):
            self._check_depth(depth, path)
            return {_TAG: "namedtuple", "module": t.__module__, "name": t.__qualname__, "fields": list(t._fields),
                    "v": [self.encode(x, (path, f".{f}"), depth + 1) for f, x in zip(t._fields, v)]}
        if isinstance(v, np.generic):
            out = self._array(np.asarray(v), path)
            out[_TAG] = "scalar"
            return out
        if t is bytes or t is bytearray:
            return {_TAG: "bytes", "b": self.blob(v)}
        if isinstance(v, (bool, int, float, str)):  # subclasses (IntEnum, ...) as their plain value
            return self.encode((bool if isinstance(v, bool) else int if isinstance(v, int)
                                else float if isinstance(v, float) else str)(v), path, depth)
        if t is Failure:
            e = v.error
            return {_TAG: "failure", "module": type(e).__module__, "name": type(e).__qualname__,
                    "message": str(e), "notes": list(getattr(e, "__notes__", None) or [])}
        if hasattr(v, "_node"):
            self._check_depth(depth, path)
            return self._dataset(v, path, depth + 1)
        raise InvalidArgumentError(f"Cannot serialise iterator state: {_path(path)} holds a {t.__module__}."
                                   f"{t.__qualname__}, which is not a state value (Python scalars, lists, "
                                   "tuples, dicts, numpy values, bytes).", "checkpoint.serialize")

    @staticmethod
    def _check_depth(depth, path):
        if depth >= MAX_DEPTH:
            raise InvalidArgumentError(f"Cannot serialise iterator state: {_path(path)} is nested deeper than "
                                       f"{MAX_DEPTH} levels.", "checkpoint.serialize")

    def _dataset(self, ds, path, depth) -> dict:
        """A dataset held as an element (a window, a group): only in-memory ones, stored by their data."""
        node = ds._node
        if node.kind in ("TensorSlices", "Tensors") and not node.inputs:
            return {_TAG: "dataset", "kind": node.kind, "data": self.encode(node.data, (path, ".data"), depth)}
        if node.kind == "Elements" and not node.inputs:
            return {_TAG: "dataset", "kind": "Elements",
                    "data": self.encode(list(node.elements), (path, ".data"), depth)}
        raise InvalidArgumentError(f"Cannot serialise iterator state: {_path(path)} holds a Dataset built by "
                                   f"{node.label()}; only in-memory datasets (windows, groups) can be saved "
                                   "as elements.", "checkpoint.serialize")

    def _array(self, a: np.ndarray, path, depth=0) -> dict:
        if a.dtype == object:
            return {_TAG: "objarray", "shape": list(a.shape),
                    "v": [self.encode(x, (path, f".flat[{i}]"), depth)
                          for i, x in enumerate(a.reshape(-1).tolist())]}
        if a.dtype.fields is not None or a.dtype.kind not in "biufcmMSUV":
            raise InvalidArgumentError(f"Cannot serialise iterator state: {_path(path)} is an array of dtype "
                                       f"{a.dtype}.", "checkpoint.serialize")
        return {_TAG: "array", "dtype": a.dtype.str, "shape": list(a.shape), "b": self.blob(a)}

    def _stacked(self, items: list, path, depth):
        """A list of elements that share one structure (a buffer of elements), stored as one stacked array
        per leaf: a few blobs instead of one JSON object per element."""
        if len(items) < _STACK_MIN:
            return None
        first = items[0]
        ft = type(first)
        if ft is tuple or ft is dict or structure.is_namedtuple(first):
            if len(set(map(type, items))) != 1:
                return None
            if ft is not dict and not any(isinstance(v, (tuple, dict)) for v in first):
                if len(set(map(len, items))) != 1:  # flat tuples: leaves are the items themselves
                    return None
                columns = list(zip(*items))
            else:
                sketch = _sketch(first)
                if any(_sketch(x) != sketch for x in items):
                    return None
                columns = list(zip(*map(structure.flatten, items)))
        elif isinstance(first, (np.ndarray, np.generic)):
            columns = [items]
        else:
            return None
        leaves, scalar = [], []
        for col in columns:
            types = set(map(type, col))
            if len(types) != 1:
                return None
            t = types.pop()
            if not issubclass(t, (np.ndarray, np.generic)):
                return None
            dtypes = set(map(_dtype_of, col))
            if len(dtypes) != 1:
                return None
            dt = dtypes.pop()
            if dt == object or dt.fields is not None:
                return None
            try:
                stacked = np.stack(col)
            except ValueError:  # shapes differ
                return None
            leaves.append(stacked)
            scalar.append(t is not np.ndarray)
        template = self.encode(structure.pack_as(first, [None] * len(leaves)), (path, "[0]"), depth + 1)
        # "order": the leaves follow structure.flatten (dict values by sorted key); states written before
        # jaxfeed followed tf.nest lack it and list dict values in insertion order (state_reader reads both)
        return {_TAG: "stacked", "n": len(items), "template": template, "scalar": scalar, "order": "sorted",
                "leaves": [self._array(a, path) for a in leaves]}


_JSON_SCALARS = (type(None), bool, int, float, str)


def _sketch(x):
    """Structure identity including namedtuple types and dict keys (cheap for plain leaves)."""
    if isinstance(x, tuple):
        return (type(x), tuple(_sketch(v) for v in x))
    if isinstance(x, dict):
        return (dict, tuple((k, _sketch(v)) for k, v in x.items()))
    return None


# =============================================================================================== bytes
def _checksum(body) -> bytes:
    """CRC32C of the body (hardware-accelerated: ~GB/s; it detects corruption, it does not authenticate)."""
    try:
        import google_crc32c
    except ImportError:  # pragma: no cover - a declared dependency; zlib's CRC32 would be a new format
        raise ImportError("jaxfeed checkpoints need google-crc32c") from None
    if not isinstance(body, bytes):
        body = bytes(body)
    return struct.pack("<I", google_crc32c.value(body))


def serialize(state) -> bytes:
    """The iterator state (as ``DatasetIterator.get_state`` returns it) as bytes."""
    w = _Writer()
    try:
        tree = w.encode(state, "state")
    except RecursionError:  # a caller deep in its own stack; MAX_DEPTH keeps ordinary saves clear of it
        raise InvalidArgumentError(f"Cannot serialise iterator state: it is nested too deeply (at most "
                                   f"{MAX_DEPTH} levels).", "checkpoint.serialize") from None
    meta = {"format": FORMAT_VERSION, "writer": "jaxfeed"}
    if isinstance(state, dict):
        meta.update({k: state[k] for k in ("version", "fingerprint") if k in state})
    header = json.dumps({"meta": meta, "tree": tree, "blobs": w.index}, separators=(",", ":")).encode()
    body = b"".join([_PREFIX.pack(MAGIC, FORMAT_VERSION, len(header), w.size), header] + w.blobs)
    return body + _checksum(body)


def deserialize(data) -> dict:
    """The state ``serialize`` wrote. Raises ``InvalidArgumentError`` for a file that is not an iterator
    state or has another format version, ``DataLossError`` for a truncated or corrupted one."""
    data = memoryview(bytes(data) if not isinstance(data, (bytes, bytearray, memoryview)) else data)
    op = "checkpoint.deserialize"
    if len(data) < len(MAGIC) or bytes(data[:len(MAGIC)]) != MAGIC:
        raise InvalidArgumentError("This is not a jaxfeed iterator state (bad magic bytes"
                                   f"{'; empty data' if not len(data) else ''}).", op)
    if len(data) < _PREFIX.size:
        raise DataLossError(f"Iterator state is truncated: {len(data)} bytes, shorter than its header.", op)
    _, version, header_len, blob_len = _PREFIX.unpack_from(data)
    if version != FORMAT_VERSION:
        raise InvalidArgumentError(f"Iterator state has file format version {version}; this jaxfeed reads "
                                   f"version {FORMAT_VERSION}.", op)
    total = _PREFIX.size + header_len + blob_len + _DIGEST
    if len(data) != total:
        kind = "truncated" if len(data) < total else "longer than it says"
        raise DataLossError(f"Iterator state is {kind}: {len(data)} bytes, expected {total}.", op)
    body, digest = data[:total - _DIGEST], bytes(data[total - _DIGEST:])
    if _checksum(body) != digest:
        raise DataLossError("Iterator state is corrupted: its checksum does not match its contents.", op)
    start = _PREFIX.size
    try:
        header = json.loads(bytes(data[start:start + header_len]))
    except RecursionError:
        raise DataLossError("Iterator state header is nested too deeply to be a state.", op) from None
    except ValueError as e:  # also bad UTF-8 and integers too long to parse
        raise DataLossError(f"Iterator state header is not valid JSON: {e}", op) from None
    if type(header) is not dict or type(header.get("meta")) is not dict or "tree" not in header:
        raise DataLossError("Iterator state header is not a state header (a JSON object with 'meta', 'tree' "
                            "and 'blobs').", op)
    blobs = data[start + header_len:start + header_len + blob_len]
    reader = Reader(blobs, blob_index(header.get("blobs"), blob_len), len(data))
    try:
        return reader.decode(header["tree"])
    except RecursionError:  # the depth bound keeps clear of this; a caller deep in its own stack may not
        raise DataLossError("Iterator state is nested too deeply to read here.", op) from None


def state_size(state) -> int:
    """Bytes that ``serialize(state)`` takes."""
    return len(serialize(state))


# =============================================================================================== files
def _fs(path: str):
    import fsspec

    return fsspec.core.url_to_fs(str(path))


def write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` to an fsspec path atomically: a temporary file renamed into place on local disks
    (readers never see a partial file); one whole-object PUT elsewhere (object stores have no rename,
    but a PUT is atomic per object)."""
    fs, p = _fs(path)
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    parent = p.rsplit("/", 1)[0] if "/" in p else ""
    if parent:
        fs.makedirs(parent, exist_ok=True)
    if protocol in ("file", "local"):
        tmp = f"{p}.tmp-{uuid.uuid4().hex[:12]}"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, p)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        return
    fs.pipe_file(p, data)


def read_bytes(path: str) -> bytes:
    fs, p = _fs(path)
    try:
        return fs.cat_file(p)
    except FileNotFoundError:
        raise NotFoundError(f"No iterator state at {path!r}.", "checkpoint.restore") from None


def save(iterator, path: str) -> int:
    """Write ``iterator``'s state to ``path`` (any fsspec URL); returns the number of bytes written."""
    data = serialize(iterator.get_state())
    write_bytes(path, data)
    return len(data)


def load(path: str) -> dict:
    """The state saved at ``path`` (see ``deserialize`` for the errors)."""
    return deserialize(read_bytes(path))


def restore(dataset, path: str, options=None):
    """A new iterator over ``dataset`` continuing from the state saved at ``path``. ``dataset`` is a
    pipeline ``Dataset``, or anything whose iterator has ``set_state`` (a distributed dataset)."""
    state = load(path)
    from .dataset import Dataset

    if isinstance(dataset, Dataset):
        return dataset.make_iterator(state=state, options=options)
    it = iter(dataset)
    it.set_state(state)
    return it


# =============================================================================================== manager
class CheckpointManager:
    """Iterator states next to a model checkpoint: ``{directory}/{step}/{name}`` (the step directories of
    orbax and similar managers), one file per worker in multi-worker jobs (``worker=i``).

    ``max_to_keep`` keeps the newest steps' iterator files and deletes older ones -- only this manager's
    own files; a step directory is removed only when nothing else is left in it. With orbax, save the
    iterator after orbax's own save of the step has finished (it writes the step directory atomically).
    """

    def __init__(self, directory: str, max_to_keep: int | None = None, name: str = "jaxfeed_iterator"):
        if max_to_keep is not None and max_to_keep < 1:
            raise InvalidArgumentError(f"CheckpointManager: max_to_keep must be at least 1, got {max_to_keep}.",
                                       "CheckpointManager")
        self.directory = str(directory).rstrip("/")
        self.max_to_keep = max_to_keep
        self.name = name

    def path(self, step: int, worker: int | None = None) -> str:
        suffix = "" if worker is None else f"-worker{int(worker):05d}"
        return f"{self.directory}/{int(step)}/{self.name}{suffix}.state"

    def save(self, step: int, iterator, worker: int | None = None) -> str:
        path = self.path(step, worker)
        save(iterator, path)
        if self.max_to_keep is not None:
            for old in self.all_steps()[:-self.max_to_keep]:
                self._delete(old)
        return path

    def restore(self, step: int, dataset, worker: int | None = None, options=None):
        return restore(dataset, self.path(step, worker), options=options)

    def load(self, step: int, worker: int | None = None) -> dict:
        """The saved state itself (for ``elastic.merge_states`` or a hand-made iterator)."""
        return load(self.path(step, worker))

    def all_steps(self) -> list[int]:
        """Steps that hold an iterator state of this manager (any worker), ascending."""
        fs, root = _fs(self.directory)
        if not fs.exists(root):
            return []
        steps = []
        for entry in fs.ls(root, detail=False):
            base = entry.rstrip("/").rsplit("/", 1)[-1]
            if base.isdigit() and any(f.rsplit("/", 1)[-1].startswith(self.name)
                                      for f in fs.ls(entry, detail=False)):
                steps.append(int(base))
        return sorted(steps)

    def latest_step(self) -> int | None:
        steps = self.all_steps()
        return steps[-1] if steps else None

    def _delete(self, step: int) -> None:
        fs, root = _fs(f"{self.directory}/{int(step)}")
        for f in fs.ls(root, detail=False):
            if f.rsplit("/", 1)[-1].startswith(self.name):
                fs.rm(f)
        if not fs.ls(root, detail=False):
            try:
                fs.rmdir(root)
            except (OSError, NotImplementedError):
                pass


# =============================================================================================== graphs
def graph_signature(root) -> list:
    """``[[fingerprint, label], ...]`` of every node, sources first (``graph.walk`` order): saved with the
    state so that restoring into another pipeline can name the first node that differs."""
    from . import graph

    memo, out = {}, []
    for node in graph.walk(root):
        fp = graph.node_fingerprint(node, [memo[id(i)] for i in node.inputs])
        memo[id(node)] = fp
        label = node.label()
        out.append([fp, label if len(label) <= 160 else label[:157] + "..."])
    return out


def describe_difference(saved, root) -> str:
    """Where a saved graph signature and the graph at ``root`` part (as ``graph.first_difference`` does for
    two graphs): the first node, from the sources up, whose fingerprint differs."""
    if not isinstance(saved, list):
        return "the state does not list its nodes, so the first differing node is unknown"
    current = graph_signature(root)
    for i, (a, b) in enumerate(zip(saved, current)):
        if not (isinstance(a, (list, tuple)) and len(a) == 2) or a[0] != b[0]:
            label = a[1] if isinstance(a, (list, tuple)) and len(a) == 2 else repr(a)
            same = (" (same arguments; its data, file names or matched files, resolved seeds or stateful "
                    "markers differ)" if label == b[1] else "")
            return f"first differing node: node {i} from the sources, saved {label} vs now {b[1]}{same}"
    if len(saved) != len(current):
        k = min(len(saved), len(current))
        if len(saved) > k:
            label = saved[k][1] if isinstance(saved[k], (list, tuple)) and len(saved[k]) == 2 else repr(saved[k])
            extra = f"saved {label} is missing now"
        else:
            extra = f"now {current[k][1]} was not in the saved pipeline"
        return (f"first differing node: node {k} from the sources ({extra}; the saved pipeline has {len(saved)} "
                f"nodes, this one {len(current)})")
    return "the nodes match but the graph fingerprint differs"


def unfit_state_error(exc: BaseException) -> InvalidArgumentError:
    """An InvalidArgumentError for a state that does not fit an iterator: names the innermost iterator
    whose ``set_state`` failed (found in the traceback) and what was wrong."""
    from .iterators.base import Iterator

    label, tb = None, exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        owner = frame.f_locals.get("self")
        if frame.f_code.co_name == "set_state" and isinstance(owner, Iterator):
            label = owner.node.label()
        tb = tb.tb_next
    what = f"missing entry {exc}" if isinstance(exc, KeyError) else f"{type(exc).__name__}: {exc}"
    where = f"the saved state of {label}" if label else "the saved state"
    return InvalidArgumentError(f"Iterator state does not fit this pipeline's iterators: {where} is not what "
                                f"this jaxfeed's iterator expects ({what}). Was it written by another jaxfeed "
                                "version, or edited?", label or "set_state")


# =============================================================================================== policy
_STATEFUL_FLAG = "__jaxfeed_stateful__"  # set by ``@jaxfeed.determinism.stateful``


def external_state_reason(node) -> str | None:
    """Why ``node`` holds state that an iterator state cannot capture, or None. The node's own ``stateful=``
    argument wins over markers on its functions (as in ``jaxfeed.determinism``)."""
    if node.kind == "Generator":
        if getattr(node, "replayable", False):
            return None
        return ("runs a Python generator, whose position cannot be saved (declare "
                "from_generator(..., replayable=True) if calling it again yields the same sequence)")
    if getattr(node, "external_state", False):
        return "holds external state"
    declared = getattr(node, "stateful", None)
    if declared is not None:
        return "calls a function declared stateful=True" if declared else None
    for role, fn in node.functions().items():
        if getattr(fn, _STATEFUL_FLAG, None) is True:
            return f"calls a {role} marked @jaxfeed.determinism.stateful"
    return None


def external_state_nodes(root) -> list:
    """Nodes whose functions hold state the iterator state cannot capture (see ``external_state_reason``):
    ``from_generator`` unless declared ``replayable=True``, nodes declared ``stateful=True`` and nodes
    calling a function marked ``@jaxfeed.determinism.stateful``. jaxfeed's inspection of function bodies
    is not used here: its findings include reads of files, which replay exactly."""
    from . import graph

    return [n for n in graph.walk(root) if external_state_reason(n) is not None]


def check_external_state(root, options) -> None:
    """Apply ``Options.experimental_external_state_policy`` when a state is saved.

    Unset or FAIL (tf.data's default) raises ``FailedPreconditionError`` naming the node: a restore would
    re-run the stateful function or generator and could resume with other data. WARN logs a warning once
    per pipeline and saves; IGNORE saves silently. A generator the user declares replayable
    (``from_generator(..., replayable=True)``: calling it again yields the same sequence) is not external
    state: a restore calls it again and skips what was consumed, which is exact.
    """
    from .options import ExternalStatePolicy

    nodes = external_state_nodes(root)
    if not nodes:
        return
    policy = options.experimental_external_state_policy if options is not None else None
    if policy == ExternalStatePolicy.IGNORE:
        return
    names = ", ".join(n.label() for n in nodes)
    if policy is None or policy == ExternalStatePolicy.FAIL:
        first = nodes[0].label()
        raise FailedPreconditionError(
            f"{first} is stateful: it {external_state_reason(nodes[0])}; a restored iterator would re-run it "
            f"and could resume with other data (stateful nodes: {names}). Refusing to save. Set "
            "Options().experimental_external_state_policy to ExternalStatePolicy.WARN or IGNORE to save anyway.",
            first)
    if names in _warned:
        return
    if len(_warned) < 1024:
        _warned.add(names)
    log.warning("Saving iterator state of a pipeline with external state (%s): a restored iterator replays "
                "or re-runs those functions, which is exact only if they are deterministic. (Logged once per "
                "pipeline; experimental_external_state_policy is WARN.)", names)


_warned: set = set()  # WARN logs once per set of stateful nodes, not at every save


__all__ = ["serialize", "deserialize", "state_size", "save", "load", "restore", "write_bytes", "read_bytes",
           "CheckpointManager", "check_external_state", "external_state_nodes", "external_state_reason",
           "graph_signature", "describe_difference", "MAGIC", "FORMAT_VERSION"]
