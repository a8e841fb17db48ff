"""Walking, rewriting, printing and fingerprinting the node graph."""

from __future__ import annotations

import functools
import hashlib
import threading
import weakref
from typing import Callable, Iterator as PyIterator

import numpy as np

from .nodes.base import Node

_STATEFUL_FLAG = "__jaxfeed_stateful__"  # set by jaxfeed.determinism.stateful (pipeline/ never imports it)


def walk(root: Node) -> PyIterator[Node]:
    """Every node once, inputs before the nodes that read them (post-order)."""
    seen: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if id(node) in seen:
            continue
        if expanded:
            seen.add(id(node))
            yield node
        else:
            stack.append((node, True))
            for child in reversed(node.inputs):
                if id(child) not in seen:
                    stack.append((child, False))


def transform(root: Node, fn: Callable[[Node], Node]) -> Node:
    """Rebuild the graph bottom-up: each node gets its (already rewritten) inputs, then ``fn`` may return a
    replacement. Shared subgraphs stay shared. Nodes whose inputs did not change are kept as they are."""
    memo: dict[int, Node] = {}
    for node in walk(root):
        new_inputs = tuple(memo[id(i)] for i in node.inputs)
        current = node if all(a is b for a, b in zip(new_inputs, node.inputs)) else node.with_inputs(new_inputs)
        memo[id(node)] = fn(current)
    return memo[id(root)]


def describe(root: Node) -> str:
    """The graph as an indented tree, output at the top, sources at the bottom."""
    lines: list[str] = []

    def visit(node: Node, prefix: str, is_last: bool, depth: int):
        if depth == 0:
            lines.append(node.label())
            child_prefix = ""
        else:
            lines.append(prefix + ("└─ " if is_last else "├─ ") + node.label())
            child_prefix = prefix + ("   " if is_last else "│  ")
        for i, child in enumerate(node.inputs):
            visit(child, child_prefix, i == len(node.inputs) - 1, depth + 1)

    visit(root, "", True, 0)
    return "\n".join(lines)


def fingerprint(root: Node) -> str:
    """A stable hex digest of everything that decides which element comes at which position: the graph's
    structure and arguments, the *contents* of in-memory data and file-name lists (a state saved over
    ``[a0, a1, a2]`` must not resume over ``[a2, a1, a0]``), the files ``list_files`` matched, in order,
    the resolved seeds of random transformations and the ``stateful`` markers of user functions. The same
    pipeline built again, in this process or another, gets the same fingerprint.

    Cost: arrays are digested in full, numeric ones with chunked CRC32C (~10 ms per 100 MB; it detects
    accidental differences, it is not a cryptographic hash), and each node's own digest is computed once
    per node object (nodes are immutable), so iterating a Dataset again does not hash its data again."""
    memo: dict[int, str] = {}
    for node in walk(root):
        stand_in = node.fingerprint_as()  # a placeholder that a pass expands counts as its expansion
        memo[id(node)] = (fingerprint(stand_in) if stand_in is not node else
                          node_fingerprint(node, [memo[id(i)] for i in node.inputs]))
    return memo[id(root)]


def node_fingerprint(node: Node, input_fingerprints) -> str:
    h = hashlib.blake2b(digest_size=12)
    h.update(_own_digest(node))
    for fp in input_fingerprints:
        h.update(fp.encode())
    return h.hexdigest()


_own_digests: "weakref.WeakKeyDictionary[Node, bytes]" = weakref.WeakKeyDictionary()
_own_digests_lock = threading.Lock()


def _own_digest(node: Node) -> bytes:
    """The digest of a node's kind, arguments and position-deciding facts, without its inputs (cached:
    hashing a 100 MB ``from_tensor_slices`` array once is enough)."""
    with _own_digests_lock:
        hit = _own_digests.get(node)
    if hit is not None:
        return hit
    h = hashlib.blake2b(digest_size=16)
    h.update(node.kind.encode())
    for key, value in sorted(node.params().items()):
        h.update(key.encode())
        _hash_value(h, value)
    for key, value in _position_facts(node):
        h.update(b"\x00fact:" + key.encode())
        _hash_value(h, value)
    digest = h.digest()
    try:
        with _own_digests_lock:
            _own_digests[node] = digest
    except TypeError:  # a node class that cannot be weakly referenced: no cache
        pass
    return digest



def _position_facts(node: Node):
    """Facts outside ``params()`` that decide positions: resolved seeds (``set_random_seed(1)`` and ``(2)``
    build the same arguments but other orders), the matches a ``list_files`` globbed, the node's own
    ``stateful`` declaration (external state for ``ExternalStatePolicy``).

    Seeds count for the nodes that set their own (``Node.seeds`` is a class default since the node contract):
    the fingerprints of the others never held them, and saved states carry fingerprints."""
    if "seeds" in vars(node):
        yield "seeds", node.seeds
    if node.is_source and not node.inputs:
        files = node.files()
        if files is not None:
            yield "files", list(files)
    if node.stateful is not None:
        yield "stateful", bool(node.stateful)


_CHUNK = 1 << 20  # CRC32C per MiB, each fed to blake2b: a change is missed only if a chunk's CRC collides


def _hash_array(h, value: np.ndarray, depth: int) -> None:
    h.update(f"ndarray{value.shape}{value.dtype.str}".encode())
    flat = value.reshape(-1)
    if not flat.size:
        return
    if value.dtype == object:
        items = flat.tolist()
        if all(type(x) is bytes for x in items):  # file names, records: one join, lengths as an array
            h.update(np.fromiter(map(len, items), dtype=np.int64, count=len(items)).tobytes())
            _hash_bytes(h, b"".join(items))
            return
        for x in items:
            h.update(b"\x00")
            _hash_value(h, x, depth + 1)
        return
    if value.dtype.hasobject:  # structured arrays holding objects: per field
        for name in value.dtype.names or ():
            _hash_array(h, np.ascontiguousarray(value[name]), depth + 1)
        return
    # bytes through a uint8 view: datetime64/timedelta64 cannot be exported as a buffer directly
    _hash_bytes(h, memoryview(np.ascontiguousarray(flat).view(np.uint8)))


def _hash_bytes(h, data) -> None:
    n = len(data)
    h.update(n.to_bytes(8, "little"))
    if n <= _CHUNK:
        h.update(data)
        return
    import google_crc32c  # a declared dependency (checkpoint digests)

    crcs = bytearray()
    for start in range(0, n, _CHUNK):
        crcs += google_crc32c.value(bytes(data[start:start + _CHUNK])).to_bytes(4, "little")
    h.update(crcs)


_MAX_DEPTH = 32  # nested arguments deeper than this are hashed by their text


def _hash_value(h, value, depth=0):
    if isinstance(value, np.ndarray):
        _hash_array(h, value, depth)
        return
    if isinstance(value, Node):
        h.update(fingerprint(value).encode())
        return
    if isinstance(value, (bytes, bytearray)):
        h.update(b"bytes")
        _hash_bytes(h, bytes(value))
        return
    if isinstance(value, str):
        h.update(b"str")
        _hash_bytes(h, value.encode("utf-8", "surrogatepass"))
        return
    if callable(value) and hasattr(value, "__code__"):
        h.update(function_identity(value).encode())
        marker = getattr(value, _STATEFUL_FLAG, None)
        if marker is not None:  # @jaxfeed.determinism.stateful changes how a state may be saved
            h.update(f"stateful={marker!r}".encode())
        return
    if isinstance(value, functools.partial) and depth < _MAX_DEPTH:
        h.update(b"partial")
        for part in (value.func, value.args, value.keywords):
            _hash_value(h, part, depth + 1)
        return
    if isinstance(value, (list, tuple)) and depth < _MAX_DEPTH:
        h.update(f"{type(value).__name__}{len(value)}".encode())
        for v in value:
            _hash_value(h, v, depth + 1)
        return
    if isinstance(value, dict) and depth < _MAX_DEPTH:
        h.update(f"dict{len(value)}".encode())
        for k, v in value.items():
            h.update(repr(k).encode())
            _hash_value(h, v, depth + 1)
        return
    if hasattr(value, "_node") and not isinstance(value, type):  # a Dataset (not a Dataset class)
        h.update(fingerprint(value._node).encode())
        return
    text = repr(value)
    if " at 0x" in text:  # default reprs carry addresses that change between runs
        text = type(value).__qualname__
    h.update(text.encode())


def function_identity(fn) -> str:
    """A name and a digest of the bytecode and constants: stable across processes for the same code."""
    code = fn.__code__
    h = hashlib.blake2b(digest_size=8)
    h.update(code.co_code)
    h.update(repr([c for c in code.co_consts if not hasattr(c, "co_code")]).encode())
    h.update(repr(code.co_names).encode())
    return f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', fn.__name__)}#{h.hexdigest()}"
