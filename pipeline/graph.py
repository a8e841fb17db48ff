"""Walking, rewriting, printing and fingerprinting the node graph."""

from __future__ import annotations

import hashlib
from typing import Callable, Iterator as PyIterator

import numpy as np

from .nodes.base import Node


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
    """A stable hex digest of the graph's structure and arguments (not of its data): the same pipeline
    built again, in this process or another, gets the same fingerprint."""
    memo: dict[int, str] = {}
    for node in walk(root):
        memo[id(node)] = node_fingerprint(node, [memo[id(i)] for i in node.inputs])
    return memo[id(root)]


def node_fingerprint(node: Node, input_fingerprints) -> str:
    h = hashlib.blake2b(digest_size=12)
    h.update(node.kind.encode())
    for key, value in sorted(node.params().items()):
        h.update(key.encode())
        _hash_value(h, value)
    for fp in input_fingerprints:
        h.update(fp.encode())
    return h.hexdigest()


def _hash_value(h, value, depth=0):
    if isinstance(value, np.ndarray):
        h.update(f"ndarray{value.shape}{value.dtype}".encode())
        flat = value.reshape(-1)
        if value.dtype != object and flat.size:
            # a bounded sample keeps fingerprinting large arrays cheap; shape and dtype are exact
            step = max(1, flat.size // 4096)
            h.update(np.ascontiguousarray(flat[::step]).tobytes())
        return
    if isinstance(value, Node):
        h.update(fingerprint(value).encode())
        return
    if callable(value) and hasattr(value, "__code__"):
        h.update(function_identity(value).encode())
        return
    if isinstance(value, (list, tuple)) and depth < 3:
        h.update(f"{type(value).__name__}{len(value)}".encode())
        for v in value[:64]:
            _hash_value(h, v, depth + 1)
        return
    if isinstance(value, dict) and depth < 3:
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


def first_difference(a: Node, b: Node) -> str | None:
    """Describe the first node (from the sources up) where two graphs differ, or None if they match."""
    fa, fb = {}, {}
    nodes_a, nodes_b = list(walk(a)), list(walk(b))
    for node in nodes_a:
        fa[id(node)] = node_fingerprint(node, [fa[id(i)] for i in node.inputs])
    for node in nodes_b:
        fb[id(node)] = node_fingerprint(node, [fb[id(i)] for i in node.inputs])
    for i, (x, y) in enumerate(zip(nodes_a, nodes_b)):
        if fa[id(x)] != fb[id(y)]:
            return f"node {i} ({x.label()} vs {y.label()})"
    if len(nodes_a) != len(nodes_b):
        return f"graph sizes differ ({len(nodes_a)} vs {len(nodes_b)} nodes)"
    return None
