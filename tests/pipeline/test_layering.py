"""The import structure of pipeline/ (issue 17): iterators depend on nodes, never the reverse, and no two
modules import each other, directly or round a loop, not even inside a function. Read from the source
(every ``import`` statement, lazy ones included), so nothing is imported to check it."""

import ast
import pathlib
import re

import pytest

from jaxfeed.pipeline import Dataset
from jaxfeed.pipeline.engine import registry
from jaxfeed.pipeline.engine.context import IteratorContext
from jaxfeed.pipeline.nodes.base import Node
from jaxfeed.pipeline.nodes.range import Range

PIPELINE = pathlib.Path(__file__).resolve().parents[2] / "pipeline"


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PIPELINE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports() -> dict[str, set[str]]:
    """Module -> the pipeline modules it imports anywhere in its text (``from . import x`` names module x)."""
    files = {_module_name(p): p for p in PIPELINE.rglob("*.py")}
    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package.split(".")
                base = ".".join(base[:len(base) - node.level + 1] + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jaxfeed.pipeline"):
                base = node.module[len("jaxfeed."):]
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            else:
                continue
            found.update(t for t in targets if t in files and t != name)
        graph[name] = found
    return graph


def _loops(graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_node_module_imports_an_iterator_or_the_dataset():
    offenders = {name: sorted(t for t in targets if t.startswith("pipeline.iterators") or t == "pipeline.dataset")
                 for name, targets in _imports().items() if name.startswith("pipeline.nodes.")}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_no_import_loop_among_pipeline_modules():
    assert _loops(_imports()) == []


def test_a_subclass_runs_on_its_base_class_iterator():
    class Countdown(Range):  # registers nothing of its own
        pass

    ctx = IteratorContext()
    it = ctx.build(Countdown(3))
    assert [int(it.next()) for _ in range(3)] == [0, 1, 2]
    it.close()


def test_a_node_without_a_registered_iterator_cannot_be_iterated():
    class Nowhere(Node):
        kind = "Nowhere"

    with pytest.raises(NotImplementedError, match="Nowhere cannot be iterated"):
        registry.build(Nowhere(), IteratorContext())


def test_a_node_class_gets_one_iterator_builder():
    class Twice(Node):
        kind = "Twice"

    def first(node, ctx):
        return None

    def second(node, ctx):
        return None

    registry.builds(Twice)(first)
    with pytest.raises(ValueError, match="already has an iterator builder"):
        registry.builds(Twice)(second)


def test_dataset_iterates_after_import_without_naming_an_iterator_module():
    assert [int(x) for x in Dataset.range(3).map(lambda x: x * 2, num_parallel_calls=2).prefetch(0)] == [0, 2, 4]


# ------------------------------------------------------------------ node knowledge lives on the nodes
ROOT = PIPELINE.parent
_PACKAGES = ("pipeline", "formats", "distribute", "determinism", "bench")


def _outside_nodes():
    for package in _PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if path.relative_to(ROOT).parts[:2] != ("pipeline", "nodes"):
                yield path


def _kind_names(expr) -> bool:
    """A node kind name, or a collection of them: tf.data-style names are CamelCase words ("Batch",
    "MapAndBatch"); a dtype's kinds are letters ("iu", "OSU"), so ``dtype.kind in "iu"`` is not one."""
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, str) and re.fullmatch(r"[A-Z][a-z]+[A-Za-z]*", expr.value) is not None
    if isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
        return any(_kind_names(e) for e in expr.elts)
    if isinstance(expr, ast.Call) and getattr(expr.func, "id", None) in ("frozenset", "set", "tuple"):
        return any(_kind_names(a) for a in expr.args)
    return False


def test_no_module_outside_nodes_decides_by_a_kind_name():
    """Issue 17: auto-shard, distribution, checkpoints and the determinism rewriter read declared capabilities;
    a renamed or new transformation cannot silently fall out of them."""
    found = []
    for path in _outside_nodes():
        tree = ast.parse(path.read_text())
        tables = {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) and _kind_names(n.value)
                  for t in n.targets if isinstance(t, ast.Name)}  # a module-level table of kind names
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            if not any(isinstance(s, ast.Attribute) and s.attr == "kind" for s in sides):
                continue
            if any(_kind_names(s) or (isinstance(s, ast.Name) and s.id in tables) for s in sides):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, f"kind-name comparisons outside pipeline/nodes/: {found}"


def test_no_getattr_probe_of_a_node_attribute_node_does_not_declare():
    declared = {name for cls in Node.__mro__ for name in vars(cls)}
    node_names = {"node", "n", "cur", "inner", "outer", "map_node", "child", "root", "culprit", "point", "na", "nb"}
    found = []
    for path in _outside_nodes():
        for call in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(call, ast.Call) and getattr(call.func, "id", None) in ("getattr", "hasattr")
                    and len(call.args) >= 2 and isinstance(call.args[1], ast.Constant)):
                continue
            target = call.args[0]
            is_node = (isinstance(target, ast.Name) and target.id in node_names) or (
                isinstance(target, ast.Attribute) and target.attr == "node")
            if is_node and call.args[1].value in declared:
                found.append(f"{path.relative_to(ROOT)}:{call.lineno} {call.args[1].value}")
    assert not found, f"getattr probes of attributes Node declares (read them directly): {found}"
