"""The import structure of pipeline/ (issue 17): iterators depend on nodes, never the reverse, and no two
modules import each other, directly or round a loop, not even inside a function. Read from the source
(every ``import`` statement, lazy ones included), so nothing is imported to check it."""

import ast
import pathlib

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
