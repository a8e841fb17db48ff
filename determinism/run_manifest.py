"""A run manifest: what is needed to replay a pipeline run months later, as JSON.

``manifest(dataset)`` records the library and dependency versions, the Python version and platform, the
global seed and every random node's (global, op) seeds, the graph fingerprint and the graph itself, each
user function's identity (name and bytecode digest), the effective options, the determinism settings, and
the identity of the input files -- path, size, modification time and etag/checksum where the filesystem
reports one, through fsspec -- for file readers whose file list is known statically (``node.files()``).
In-memory sources are identified by a digest of their data (``from_tensor_slices`` arrays).

``manifest(dataset, compare_to=old)`` (a manifest dict or a path to a saved one) adds ``"changes"``: what
differs (``compare_manifests``), e.g. ``"input file /data/a.tfrecord: size 1024 -> 2048"``.
``save(m, path)`` / ``load(path)`` write and read it (local paths or fsspec URLs).
"""

from __future__ import annotations

import datetime
import hashlib
import importlib.metadata
import json
import platform
import sys

import numpy as np

from ..pipeline import graph
from ..pipeline.passes.options_pass import effective_options
from . import config

MANIFEST_VERSION = 1
PACKAGES = ("jaxfeed", "numpy", "jax", "jaxlib", "pyarrow", "fsspec", "cloudpickle", "protobuf", "google-crc32c")
_VOLATILE = ("created",)  # keys that differ on every call and are not reported as changes


def _version(package: str):
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _jsonable(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def file_identity(path: str) -> dict:
    """Size, modification time and etag/checksum of one file, through fsspec (``error`` if unreachable)."""
    import fsspec

    try:
        fs, inner = fsspec.core.url_to_fs(path)
        info = fs.info(inner)
    except Exception as e:  # noqa: BLE001 - a missing file is recorded, not fatal
        return {"path": path, "error": f"{type(e).__name__}: {e}"}
    out = {"path": path, "size": info.get("size")}
    for key in ("mtime", "LastModified", "last_modified", "updated", "created"):
        if info.get(key) is not None:
            value = info[key]
            out["mtime"] = value.isoformat() if hasattr(value, "isoformat") else value
            break
    for key in ("ETag", "etag", "md5Hash", "crc32c", "checksum"):
        if info.get(key) is not None:
            out["etag"] = str(info[key]).strip('"')
            break
    return _jsonable(out)


def _data_digest(node) -> str | None:
    """A digest of an in-memory source's full data (capped at 256 MiB of array bytes)."""
    from ..pipeline.nodes.tensor_slices import Tensors, TensorSlices

    if not isinstance(node, (TensorSlices, Tensors)):
        return None
    data = node.data
    from ..pipeline import structure

    h = hashlib.blake2b(digest_size=16)
    budget = 256 << 20
    for leaf in structure.flatten(data):
        arr = np.asarray(leaf)
        h.update(f"{arr.dtype.str}{arr.shape}".encode())
        if arr.dtype == object:
            h.update(repr(arr.reshape(-1).tolist()[:100_000]).encode())
        elif arr.nbytes <= budget:
            h.update(np.ascontiguousarray(arr).tobytes())
            budget -= arr.nbytes
    return h.hexdigest()


def manifest(dataset, compare_to=None) -> dict:
    """The run manifest of ``dataset`` (see the module docstring); JSON-serialisable."""
    root = dataset._node
    nodes = list(graph.walk(root))
    labels = {id(n): f"{i}:{n.kind}" + (f"[{n.name}]" if n.name else "") for i, n in enumerate(nodes)}
    seeds, functions, files, data = {}, {}, [], {}
    for n in nodes:
        if n.is_random:
            s = n.seeds
            seeds[labels[id(n)]] = None if s is None else [int(s[0]), int(s[1])]
        for role, fn in n.functions().items():
            ident = graph.function_identity(fn) if hasattr(fn, "__code__") else repr(type(fn).__qualname__)
            functions[f"{labels[id(n)]}.{role}"] = ident
        try:
            names = n.files()
        except Exception:  # noqa: BLE001 - a listing that fails here is not part of the manifest
            names = None
        if names:
            files.extend(file_identity(str(p)) for p in names)
        digest = _data_digest(n)
        if digest is not None:
            data[labels[id(n)]] = digest
    opts = effective_options(root)
    m = {
        "manifest_version": MANIFEST_VERSION,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": {p: _version(p) for p in PACKAGES},
        "determinism": _jsonable(config.settings()),
        "global_seed": config.random_seed.get_global_seed(),
        "op_seeds": seeds,
        "graph_fingerprint": graph.fingerprint(root),
        "graph": graph.describe(root).splitlines(),
        "functions": functions,
        "options": {k: _jsonable(v) for k, v in opts._items()},
        "input_files": files,
        "input_data": data,
    }
    m = _jsonable(m)
    if compare_to is not None:
        old = load(compare_to) if isinstance(compare_to, str) else compare_to
        m["changes"] = compare_manifests(old, m)
    return m


def compare_manifests(old: dict, new: dict) -> list[str]:
    """What differs between two manifests, one line per difference (empty: nothing changed)."""
    changes = []
    old_files = {f["path"]: f for f in old.get("input_files", [])}
    new_files = {f["path"]: f for f in new.get("input_files", [])}
    for path in old_files.keys() - new_files.keys():
        changes.append(f"input file {path}: no longer read")
    for path in new_files.keys() - old_files.keys():
        changes.append(f"input file {path}: newly read")
    for path in sorted(old_files.keys() & new_files.keys()):
        a, b = old_files[path], new_files[path]
        for key in sorted((a.keys() | b.keys()) - {"path"}):
            if a.get(key) != b.get(key):
                changes.append(f"input file {path}: {key} {a.get(key)} -> {b.get(key)}")
    for key in sorted((old.keys() | new.keys()) - {"input_files", "changes", *_VOLATILE}):
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            for sub in sorted(a.keys() | b.keys()):
                if a.get(sub) != b.get(sub):
                    changes.append(f"{key}.{sub}: {a.get(sub)!r} -> {b.get(sub)!r}")
        else:
            changes.append(f"{key}: {_short(a)} -> {_short(b)}")
    return changes


def _short(value) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 120 else text[:117] + "..."


def save(m: dict, path: str) -> None:
    import fsspec

    with fsspec.open(path, "w") as f:
        json.dump(m, f, indent=1, sort_keys=True)


def load(path: str) -> dict:
    import fsspec

    with fsspec.open(path, "r") as f:
        return json.load(f)
