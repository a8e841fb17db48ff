"""``check_determinism``: run a pipeline several times, fingerprint every element, and say where runs diverge.

Each run iterates a fresh copy of the graph (a new ``Dataset`` over the same nodes, so epoch 0 every time;
with a function, the function is called again, so unseeded seeds are drawn again, as in a new process).
With a global seed set, Python's and NumPy's global RNGs are re-seeded before each run, as a fresh process
that calls ``set_random_seed`` would be. Runs may use different parallelism (``parallelism=[1, 2, AUTOTUNE]``
or ``variants=[{"num_parallel_calls": 2, "executor": "process"}]``): every node that has a
``num_parallel_calls`` (or ``executor``) gets the variant's value.

Every element is fingerprinted leaf by leaf (dtype, shape and a hash of the bytes). The report is either
"deterministic over N elements" or the first diverging element: its index, the leaf that differs, and the
graph node that most likely introduced the difference, found by bisecting along the graph: prefixes of the
graph (the subgraph under a node) are re-run the same way, and the culprit is the lowest node whose output
diverges while its inputs do not. Nondeterminism that depends on timing may not show in every run: a
"deterministic" verdict is evidence, not proof.

Command line: ``jaxfeed-check-determinism module:function`` (a function returning a Dataset) prints the
report; exit status 0 when deterministic, 1 when not, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib
import os
import random
import sys
from typing import Callable

import numpy as np

from ..pipeline import graph, random_seed, structure
from ..pipeline.dataset import Dataset
from ..pipeline.passes.options_pass import effective_options
from ..pipeline.nodes.batch import Batch
from ..pipeline.nodes.interleave import Interleave
from ..pipeline.nodes.map import Map
from . import build_difference

DEFAULT_MAX_ELEMENTS = 10_000


@dataclasses.dataclass
class CheckReport:
    deterministic: bool
    elements: int  # elements compared (of the first run)
    runs: int
    index: int | None = None  # first diverging element
    leaf: str | None = None  # path of the first differing leaf, e.g. "[0]['image']"
    detail: str = ""  # how it differs
    runs_compared: tuple = ()  # (a, b): which runs diverged
    culprit: str | None = None  # label of the node that most likely introduced the difference
    culprit_hint: str = ""  # what the rewriter knows about that node (stateful function, unseeded, ...)
    builds_differ: bool = False  # each build repeats itself; the function built a different pipeline each call
    variants: list = dataclasses.field(default_factory=list)

    def __bool__(self):
        return self.deterministic

    def __str__(self):
        if self.deterministic:
            return f"deterministic over {self.elements} elements ({self.runs} runs)"
        lines = [f"NOT deterministic: element {self.index} differs between run {self.runs_compared[0]} and run "
                 f"{self.runs_compared[1]}" + (f" at leaf {self.leaf}" if self.leaf else "") + f": {self.detail}"]
        if self.builds_differ:
            lines.append(f"the builds differ: the function builds a different pipeline each call, at {self.culprit}")
        elif self.culprit:
            lines.append(f"most likely introduced by: {self.culprit}")
        if self.culprit_hint:
            lines.append(f"  why: {self.culprit_hint}")
        return "\n".join(lines)


# ------------------------------------------------------------------------------------ fingerprints
def leaf_fingerprint(leaf) -> tuple:
    """(dtype, shape, digest of the bytes) of one leaf."""
    if isinstance(leaf, bytes):
        return ("bytes", (), hashlib.blake2b(leaf, digest_size=16).hexdigest())
    if hasattr(leaf, "_node"):  # a window (a Dataset): its elements
        h = hashlib.blake2b(digest_size=16)
        for e in leaf:
            h.update(repr(element_fingerprint(e)).encode())
        return ("dataset", (), h.hexdigest())
    arr = np.asarray(leaf)
    if arr.dtype == object:
        data = repr([bytes(v) if isinstance(v, (bytes, bytearray)) else v for v in arr.reshape(-1).tolist()])
        return (arr.dtype.str, arr.shape, hashlib.blake2b(data.encode(), digest_size=16).hexdigest())
    return (arr.dtype.str, arr.shape, hashlib.blake2b(np.ascontiguousarray(arr).tobytes(),
                                                      digest_size=16).hexdigest())


def element_fingerprint(element) -> tuple:
    """((path, (dtype, shape, digest)), ...) for every leaf of an element."""
    return tuple((path, leaf_fingerprint(leaf)) for path, leaf in structure.iter_structure_paths(element))


# ------------------------------------------------------------------------------------ running
def _variant_graph(node, variant: dict | None):
    if not variant:
        return node

    def rewrite(n):
        changes = {}
        if n.num_parallel_calls is not None and "num_parallel_calls" in variant:
            changes["num_parallel_calls"] = variant["num_parallel_calls"]
        if "executor" in variant and isinstance(n, Map) and n.num_parallel_calls is not None:
            changes["executor"] = variant["executor"]
        if "deterministic" in variant and isinstance(n, (Map, Interleave, Batch)):  # the nodes with the argument
            changes["deterministic"] = variant["deterministic"]
        return n.replace(**changes) if changes else n

    return graph.transform(node, rewrite)


def _reseed_globals():
    seed = random_seed.get_global_seed()
    if seed is not None:
        random.seed(seed)
        np.random.seed(seed & 0xFFFFFFFF)


def _run(node, options, variant, max_elements) -> list:
    from tqdm import tqdm

    _reseed_globals()
    it = Dataset(_variant_graph(node, variant)).make_iterator(options=options)
    out = []
    # a progress bar on a terminal only (disable=None): a long check shows it is moving
    bar = tqdm(unit="el", desc="check_determinism", disable=None, leave=False)
    try:
        while len(out) < max_elements:
            block = it.next_many(min(256, max_elements - len(out)))
            if not block:
                break
            out.extend(element_fingerprint(e) for e in block)
            bar.update(len(block))
    finally:
        bar.close()
        it.close()
    return out


def _first_difference(a: list, b: list):
    """(index, leaf path, detail) of the first difference between two fingerprint lists, or None."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            if len(x) != len(y) or [p for p, _ in x] != [p for p, _ in y]:
                return i, None, "the element structures differ"
            for (path, fx), (_, fy) in zip(x, y):
                if fx != fy:
                    if fx[0] != fy[0]:
                        what = f"dtype {fx[0]} vs {fy[0]}"
                    elif fx[1] != fy[1]:
                        what = f"shape {fx[1]} vs {fy[1]}"
                    else:
                        what = f"bytes differ (dtype {fx[0]}, shape {fx[1]})"
                    return i, path, what
    if len(a) != len(b):
        return min(len(a), len(b)), None, f"the runs have different lengths ({len(a)} vs {len(b)} elements)"
    return None


def _diverges(node, options, variants, runs, max_elements):
    """The first divergence among ``runs`` runs of the subgraph under ``node``, or None."""
    first = _run(node, options, variants[0], max_elements)
    for r in range(1, runs):
        other = _run(node, options, variants[r % len(variants)], max_elements)
        diff = _first_difference(first, other)
        if diff is not None:
            return (0, r), diff, len(first)
    return None, None, len(first)


def _culprit(node, options, variants, runs, max_elements):
    """The lowest node on the path to the sources whose output diverges while its inputs do not."""
    spine = [node]
    while spine[-1].inputs:
        spine.append(spine[-1].inputs[0])
    spine.reverse()  # sources first; the last entry (``node``) is known to diverge
    lo, hi = 0, len(spine) - 1  # invariant: spine[hi] diverges; everything below lo is deterministic
    while lo < hi:
        mid = (lo + hi) // 2
        if _diverges(spine[mid], options, variants, runs, max_elements)[0] is not None:
            hi = mid
        else:
            lo = mid + 1
    found = spine[hi]
    for extra in found.inputs[1:]:  # a multi-input node: does another input diverge already?
        if _diverges(extra, options, variants, runs, max_elements)[0] is not None:
            return _culprit(extra, options, variants, runs, max_elements)
    return found


def _hint(node) -> str:
    from .rewriter import node_reports

    reasons = []
    if node.is_random and node.seeds is None:
        reasons.append("a random transformation with no seed (neither an op seed nor a global seed)")
    try:
        for role, report in node_reports(node).items():
            if report.stateful:
                reasons.append(f"{role} is stateful: {report.reason()}")
            for f in report.unimplemented:
                reasons.append(f"{role} uses {f}")
    except Exception:  # noqa: BLE001 - a hint must not break the report
        pass
    if node.deterministic is False and node.num_parallel_calls is not None:
        reasons.append(f"a parallel stage (num_parallel_calls={node.num_parallel_calls}, "
                       f"deterministic={node.deterministic}) may deliver out of order")
    return "; ".join(reasons)


def check_determinism(dataset_or_fn: Dataset | Callable[[], Dataset], runs: int = 2, *, parallelism=None,
                      variants=None, max_elements: int = DEFAULT_MAX_ELEMENTS, bisect: bool = True,
                      options=None) -> CheckReport:
    """Iterate a pipeline ``runs`` times (at least 2) and compare every element (see the module docstring).

    ``parallelism``: num_parallel_calls values, one per run in turn (e.g. ``[1, 2, AUTOTUNE]``);
    ``variants``: dicts of node attributes per run (``num_parallel_calls``, ``executor``, ``deterministic``);
    ``max_elements``: compare at most this many elements per run (infinite pipelines need it);
    ``bisect``: find the node that introduced a difference (re-runs subgraphs; off: faster)."""
    if runs < 2:
        raise ValueError("check_determinism: runs must be at least 2")
    if parallelism is not None and variants is not None:
        raise ValueError("check_determinism: give either parallelism= or variants=, not both")
    if parallelism is not None:
        variants = [{"num_parallel_calls": p} for p in parallelism]
    variants = list(variants) if variants else [None]
    build = dataset_or_fn if callable(dataset_or_fn) and not isinstance(dataset_or_fn, Dataset) else None

    def root():
        ds = build() if build is not None else dataset_or_fn
        if not isinstance(ds, Dataset):
            raise TypeError(f"check_determinism: expected a Dataset (or a function returning one), got "
                            f"{type(ds).__name__}")
        return ds._node

    node = root()
    opts = effective_options(node) if options is None else effective_options(node).merge(options)
    first = _run(node, opts, variants[0], max_elements)
    report = CheckReport(True, len(first), runs, variants=variants)
    other_node = node
    for r in range(1, runs):
        other_node = root() if build is not None else node
        other = _run(other_node, opts, variants[r % len(variants)], max_elements)
        diff = _first_difference(first, other)
        if diff is not None:
            report.deterministic = False
            report.index, report.leaf, report.detail = diff
            report.runs_compared = (0, r)
            break
    if not report.deterministic and bisect and other_node is not node and \
            _blame_the_builds(report, node, other_node, opts, variants, runs, max_elements):
        return report
    if not report.deterministic and bisect:
        culprit = _culprit(node, opts, variants, runs, max_elements)
        hint = _hint(culprit)
        if not hint:
            # Timing-dependent nondeterminism may not show in every run of a prefix, so the bisection can
            # stop above its source. A node with no known source of nondeterminism is deterministic given
            # its input: blame the nearest node below it that has one.
            below = _nearest_suspect(culprit)
            if below is not None:
                hint = (f"{_hint(below)} (the bisection stopped at {culprit.label()}, which is deterministic "
                        "given its input; this is the nearest node below it that can reorder or draw fresh "
                        "randomness)")
                culprit = below
        remote = culprit.remote_dataset()  # a service source: look at what its workers run
        if remote is not None:
            inner_node = remote._node
            inner = _culprit(inner_node, effective_options(inner_node), [None], runs, max_elements)
            hint = (f"the elements differ as they come from the service's workers; run locally, the dataset "
                    f"they run differs at {inner.label()}" + (f": {_hint(inner)}" if _hint(inner) else ""))
        report.culprit = culprit.label()
        report.culprit_hint = hint
    return report


def _blame_the_builds(report, node, other_node, opts, variants, runs, max_elements) -> bool:
    """When two builds differ in a node's arguments or captured values (randomness drawn while building) and
    one build repeats itself, that node is the culprit: say so in the report. False otherwise."""
    found = build_difference.first_difference(node, other_node)
    if found is None or _diverges(node, opts, variants, runs, max_elements)[0] is not None:
        return False  # no visible difference, or one build is nondeterministic on its own: bisect it
    culprit, what = found
    report.builds_differ = True
    report.culprit = culprit.label()
    report.culprit_hint = (f"{what}. Each build repeats its own output; values drawn while the pipeline is built "
                           "are drawn again by every build. Draw them from a seeded generator (or pass them in), "
                           "or draw per-element randomness inside the pipeline (map(..., with_rng=True)).")
    return True


def _nearest_suspect(node):
    """The closest node under ``node`` with a known source of nondeterminism, or None."""
    frontier = list(node.inputs)
    seen = set()
    while frontier:
        nxt = []
        for n in frontier:
            if id(n) in seen:
                continue
            seen.add(id(n))
            if _hint(n):
                return n
            nxt.extend(n.inputs)
        frontier = nxt
    return None


# ------------------------------------------------------------------------------------ command line
def _load(target: str):
    if ":" not in target:
        raise SystemExit(f"jaxfeed-check-determinism: expected module:function, got {target!r}")
    module_name, _, attr = target.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    module = importlib.import_module(module_name)
    fn = module
    for part in attr.split("."):
        fn = getattr(fn, part)
    return fn


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="jaxfeed-check-determinism",
        description="Iterate a pipeline several times and report whether every element is identical.")
    parser.add_argument("target", help="module:function, a function returning a Dataset")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--max-elements", type=int, default=DEFAULT_MAX_ELEMENTS)
    parser.add_argument("--parallelism", default=None,
                        help="comma-separated num_parallel_calls values, one per run (-1 = AUTOTUNE)")
    parser.add_argument("--enable", action="store_true", help="enable op determinism first")
    parser.add_argument("--seed", type=int, default=None, help="call set_random_seed(SEED) first")
    parser.add_argument("--no-bisect", action="store_true", help="do not search for the culprit node")
    args = parser.parse_args(argv)
    from . import enable_op_determinism, set_random_seed

    if args.enable:
        enable_op_determinism()
    if args.seed is not None:
        set_random_seed(args.seed)
    try:
        fn = _load(args.target)
    except (ImportError, AttributeError) as e:
        print(f"jaxfeed-check-determinism: cannot load {args.target}: {e}", file=sys.stderr)
        return 2
    parallelism = None if args.parallelism is None else [int(p) for p in args.parallelism.split(",")]
    from ..pipeline.errors import UnimplementedError

    try:
        report = check_determinism(fn, runs=args.runs, parallelism=parallelism, max_elements=args.max_elements,
                                   bisect=not args.no_bisect)
    except (RuntimeError, UnimplementedError) as e:  # determinism mode refused the pipeline
        if not args.enable:
            raise
        print(f"NOT deterministic: determinism mode refuses this pipeline: {e}")
        return 1
    print(report)
    return 0 if report.deterministic else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
