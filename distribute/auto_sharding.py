"""Auto-sharding: the graph rewrite that gives each input worker its share of a dataset (no JAX here).

``auto_shard(dataset, num_workers, index)`` returns the dataset worker ``index`` reads, following the
dataset's ``Options().experimental_distribute.auto_shard_policy`` (docs/tf-behaviour.md#auto-shard):

- FILE: walk from the output towards the sources through pass-through transformations (batch, map,
  filter, shuffle, repeat, take, prefetch, ...; zip and concatenate: every input) to the *sharding points*:
  file readers (``reads_files``) and interleave/flat_map/map whose function returns a reader. At each point,
  ``shard(num_workers, index)`` goes on the stream of file names, and shuffles of that stream move below the
  new shard (each worker's file *set* is then independent of the seed). FILE is all-or-nothing: if any
  branch cannot be sharded by file, nothing is rewritten (tf.data rewrites part of the graph and then
  shards by data on top, which loses records; we never do).
- DATA: every worker runs the whole pipeline and keeps elements ``index, index + n, ...`` of its output
  (the shard goes before a trailing prefetch). Balanced per-replica rebatching becomes the legacy split
  (tf.distribute's rule), unless the distributed dataset asked for "always balanced".
- AUTO: FILE when the graph reads files, else DATA, with a logged warning that says why.
- HINT: every ``shard(SHARD_HINT, SHARD_HINT)`` becomes ``shard(n, index)``. OFF: nothing changes.

Every shard inserted here is marked ``require_non_empty`` (tf.data's rule: a worker whose input has fewer
elements than there are workers raises before its first element). When the file list is known statically
and has fewer files than workers, FILE raises at once with the counts.

``auto_shard_plan(dataset, num_workers)`` says, before anything runs, which policy applies and why, what
each worker gets (file names or element positions), and checks that the shares neither overlap nor leave
anything out, raising ``AutoShardError`` on a gap or overlap it can prove.
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass, field

import numpy as np

from jaxfeed.pipeline import graph
from jaxfeed.pipeline.dataset import Dataset
from jaxfeed.pipeline.errors import InvalidArgumentError, NotFoundError
from jaxfeed.pipeline import random_seed
from jaxfeed.pipeline.nodes.base import INFINITE, UNKNOWN, Node, ShardWalk
from jaxfeed.pipeline.nodes.shard import Shard
from jaxfeed.pipeline.options import AutoShardPolicy, Options
from jaxfeed.pipeline.passes import PassLog

log = logging.getLogger("jaxfeed")

class AutoShardError(InvalidArgumentError):
    """An auto-shard plan whose workers' shares provably overlap or leave elements out."""


class _Unshardable(Exception):
    """FILE sharding does not apply to this graph (the reason is the message)."""


# ================================================================================ FILE
_reader_answers: "weakref.WeakKeyDictionary[Node, bool]" = weakref.WeakKeyDictionary()


def _returns_reader(node: Node) -> bool:
    """Does this interleave/flat_map/map's function return a dataset that reads files (a map: among its
    result's components)? Asked once per node (nodes never change): the function is called once, on a
    sample file name, as tf.data traces it once -- not again for each iterator of a distributed dataset,
    whose auto-shard pass asks at every iteration."""
    known = _reader_answers.get(node)
    if known is None:
        known = _reader_answers[node] = _call_returns_reader(node)
    return known


def _call_returns_reader(node: Node) -> bool:
    """``_returns_reader`` without the memo. A function given datasets (flat_map(lambda d: d) over a map that
    makes them) makes no reader itself."""
    from jaxfeed.pipeline import structure
    from jaxfeed.pipeline.nodes.common import call, sample_element

    fn = node.functions().get("map_func")
    if fn is None:
        return False
    try:
        sample = sample_element(node.inputs[0])
    except StopIteration:
        return False
    if any(isinstance(leaf, Dataset) for leaf in structure.flatten(sample)):
        return False  # the datasets were made upstream: the walk goes on to where
    try:
        result = call(fn, sample)
    except Exception:  # noqa: BLE001 - a function that fails on a sample is not a reader we can prove
        return False
    leaves = structure.flatten(tuple(result) if type(result) is list else result)
    return any(isinstance(leaf, Dataset) and any(n.reads_files for n in graph.walk(leaf._node)) for leaf in leaves)


def brief(node: Node) -> str:
    """A node for a one-line message: its kind and arguments, arrays and structures of them given by shape
    and dtype (a log line must not carry the data: ``label()`` shows a tuple of arrays' contents)."""
    def short(v, depth=0):
        if isinstance(v, np.ndarray) or (hasattr(v, "shape") and hasattr(v, "dtype")):
            return f"<{v.dtype}{list(v.shape)}>"
        if isinstance(v, (tuple, list)) and depth < 2:
            inner = ", ".join(short(x, depth + 1) for x in v[:4]) + (", ..." if len(v) > 4 else "")
            return f"({inner})" if isinstance(v, tuple) else f"[{inner}]"
        if isinstance(v, dict) and depth < 2:
            items = list(v.items())
            return "{" + ", ".join(f"{k!r}: {short(x, depth + 1)}" for k, x in items[:4]) + \
                (", ..." if len(items) > 4 else "") + "}"
        if callable(v) and hasattr(v, "__name__"):
            return getattr(v, "__qualname__", v.__name__)
        if isinstance(v, Node):
            return v.kind
        text = repr(v)
        return text if len(text) <= 40 else text[:37] + "..."

    args = ", ".join(f"{k}={short(v)}" for k, v in node.params().items())
    return f"{node.kind}({args})" + (f" name={node.name!r}" if node.name else "")


def find_sharding_points(root: Node) -> list[Node]:
    """The nodes whose first input is a stream of file names to shard; raises ``_Unshardable``."""
    points: list[Node] = []

    def visit(node: Node):
        walk = node.shard_walk
        if node.reads_files:
            points.append(node)
            return
        if walk == ShardWalk.FILE_MAPPER:
            if _returns_reader(node):
                points.append(node)
                return
            visit(node.inputs[0])  # flat_map/interleave over something else: keep walking its input
            return
        if walk == ShardWalk.EVERY_INPUT:
            for child in node.inputs:
                visit(child)
            return
        if walk == ShardWalk.DATASET_MAPPER and node.inputs:
            found = len(points)
            try:
                visit(node.inputs[0])  # a map over records: its input reads the files
            except _Unshardable:
                if not _returns_reader(node):
                    raise
                del points[found:]
                points.append(node)  # a map over file names that makes a reader per name
            return
        if walk == ShardWalk.THROUGH and node.inputs:
            visit(node.inputs[0])
            return
        if node.is_source or not node.inputs:
            raise _Unshardable(f"Found an unshardable source dataset: {brief(node)}")
        raise _Unshardable(f"Did not find a shardable source, walked to a node which is not a file reader or a "
                           f"pass-through transformation: {brief(node)}")

    visit(root)
    return points


def _static_file_count(node: Node) -> int:
    n = node.cardinality()
    return n if n >= 0 else UNKNOWN


def _strip_shuffles(node: Node) -> tuple[Node, Node | None]:
    """The file-name graph without its shuffles (stages that only reorder), and the first shuffle met from
    the output (to put back)."""
    shuffles = [n for n in graph.walk(node) if n.only_reorders]
    if not shuffles:
        return node, None
    # the one nearest the output: walk down the first-input chain
    first = None
    cur = node
    while cur is not None:
        if cur.only_reorders:
            first = cur
            break
        cur = cur.inputs[0] if cur.inputs else None
    first = first or shuffles[-1]
    stripped = graph.transform(node, lambda n: n.inputs[0] if n.only_reorders else n)
    return stripped, first


def _shard_file_names(point: Node, num_workers: int, index: int, log_: PassLog | None) -> Node:
    names, shuffle = _strip_shuffles(point.inputs[0])
    new_input: Node = Shard(names, num_workers, index, require_non_empty=True)
    if shuffle is not None:
        new_input = shuffle.with_inputs((new_input,))
    if log_ is not None:
        moved = " (its shuffle moved below the shard)" if shuffle is not None else ""
        log_.note(point, f"FILE: worker {index} of {num_workers} reads file names {index}::{num_workers}{moved}")
    return point.with_inputs((new_input,) + tuple(point.inputs[1:]))


def apply_file(root: Node, num_workers: int, index: int, log_: PassLog | None = None) -> Node:
    points = find_sharding_points(root)  # raises _Unshardable before anything is rewritten
    for p in points:
        n = _static_file_count(p.inputs[0])
        if n >= 0 and n < num_workers:
            raise InvalidArgumentError(
                f"Could not apply FILE based sharding: the dataset only has {n} file(s), which is not enough for "
                f"the required {num_workers} shards/workers (file reader {p.label()}). Set the auto sharding "
                "policy to DATA or OFF with `Options().experimental_distribute.auto_shard_policy`, or split the "
                "input into at least as many files as workers.", "auto_shard")
    if num_workers == 1:
        return root
    ids = {id(p) for p in points}
    return graph.transform(root, lambda n: _shard_file_names(n, num_workers, index, log_)
                           if id(n) in ids else n)  # nothing below a point changes: identity holds


# ================================================================================ DATA / HINT
def apply_data(root: Node, num_workers: int, index: int, log_: PassLog | None = None,
               keep_balanced: bool = False) -> Node:
    """Shard the output (beneath a trailing chain of output stages: prefetch, with_options); balanced
    rebatch becomes legacy."""
    root = graph.transform(root, lambda n: _to_legacy(n, keep_balanced, log_))
    trailing: list[Node] = []
    cur = root
    while cur.output_stage and cur.inputs:
        trailing.append(cur)
        cur = cur.inputs[0]
    new: Node = Shard(cur, num_workers, index, require_non_empty=True)
    if log_ is not None:
        log_.note(cur, f"DATA: worker {index} of {num_workers} keeps output elements {index}::{num_workers}")
    for t in reversed(trailing):
        new = t.with_inputs((new,) + tuple(t.inputs[1:]))
    return new


def _to_legacy(node: Node, keep_balanced: bool, log_):
    new = node.for_data_sharding(keep_balanced)
    if log_ is not None and new is not node:
        log_.note(node, "DATA: the balanced per-replica split becomes the legacy split (tf.distribute's rule)")
    return new


def _is_hint(node: Node) -> bool:
    """A ``shard(SHARD_HINT, SHARD_HINT)`` placeholder (HINT's points)."""
    return isinstance(node, Shard) and node.is_hint


def apply_hint(root: Node, num_workers: int, index: int, log_: PassLog | None = None) -> Node:
    def fix(n: Node) -> Node:
        if _is_hint(n):
            if log_ is not None:
                log_.note(n, f"HINT: shard(SHARD_HINT, SHARD_HINT) -> shard({num_workers}, {index})")
            new = Shard(n.inputs[0], num_workers, index, require_non_empty=True)
            new.name = n.name
            return new
        return n

    return graph.transform(root, fix)


# ================================================================================ the decision
@dataclass
class Decision:
    requested: AutoShardPolicy
    applied: AutoShardPolicy
    reason: str
    points: list = field(default_factory=list)  # FILE sharding points


def decide(root: Node, options: Options) -> Decision:
    requested = options.experimental_distribute.auto_shard_policy
    requested = AutoShardPolicy.AUTO if requested is None else AutoShardPolicy(requested)
    if requested == AutoShardPolicy.OFF:
        return Decision(requested, requested, "the policy is OFF: every worker reads the whole dataset")
    if requested == AutoShardPolicy.HINT:
        hints = [n for n in graph.walk(root) if _is_hint(n)]
        why = (f"the policy is HINT: {len(hints)} shard(SHARD_HINT, SHARD_HINT) placeholder(s) rewritten" if hints
               else "the policy is HINT but the graph has no shard(SHARD_HINT, SHARD_HINT): every worker reads "
                    "everything")
        return Decision(requested, requested, why)
    if requested == AutoShardPolicy.DATA:
        return Decision(requested, requested, "the policy is DATA: every worker runs the whole pipeline and keeps "
                                              "every n-th output element")
    try:
        points = find_sharding_points(root)
    except _Unshardable as e:
        if requested == AutoShardPolicy.FILE:
            raise NotFoundError(
                f"Could not apply FILE based sharding: {e}. Consider either turning off auto-sharding or switching "
                "the auto_shard_policy to DATA to shard this dataset (Options().experimental_distribute."
                "auto_shard_policy).", "auto_shard") from None
        return Decision(requested, AutoShardPolicy.DATA,
                        f"AUTO fell back to DATA because FILE sharding does not apply: {e}")
    readers = ", ".join(p.label() for p in points)
    return Decision(requested, AutoShardPolicy.FILE,
                    f"{'the policy is FILE' if requested == AutoShardPolicy.FILE else 'AUTO chose FILE'}: the graph "
                    f"reads files ({readers})", points)


def rewrite(root: Node, options: Options, num_workers: int, index: int, log_: PassLog | None = None,
            keep_balanced: bool = False, warn: bool = True) -> tuple[Node, Decision]:
    """Apply the policy to a raw graph; returns the new graph and the decision taken. On one worker there is
    nothing to share out: a FILE policy the graph cannot follow is skipped (tf.data skips the FILE rewrite
    for one worker) and AUTO's fall-back to DATA is not warned about (nothing is wrong)."""
    _check_worker(num_workers, index)
    try:
        d = decide(root, options)
    except NotFoundError:
        if num_workers > 1:
            raise
        return root, Decision(AutoShardPolicy.FILE, AutoShardPolicy.OFF,
                              "the policy is FILE but the graph reads no files; on one worker nothing is sharded "
                              "(tf.data skips the FILE rewrite for one worker)")
    if d.applied == AutoShardPolicy.FILE:
        return apply_file(root, num_workers, index, log_), d
    if d.applied == AutoShardPolicy.DATA:
        if warn and d.requested == AutoShardPolicy.AUTO and num_workers > 1:
            log.warning("auto_shard: %s. Set Options().experimental_distribute.auto_shard_policy to DATA or OFF to "
                        "silence this.", d.reason)
        return apply_data(root, num_workers, index, log_, keep_balanced), d
    if d.applied == AutoShardPolicy.HINT:
        return apply_hint(root, num_workers, index, log_), d
    return root, d


def _check_worker(num_workers, index):
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise InvalidArgumentError(f"auto_shard: num_workers must be a positive integer, got {num_workers!r}",
                                   "auto_shard")
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < num_workers:
        raise InvalidArgumentError(f"auto_shard: index must be in [0, {num_workers}), got {index!r}", "auto_shard")


def auto_shard(dataset: Dataset, num_workers: int, index: int, *, keep_balanced: bool = False,
               log: PassLog | None = None) -> Dataset:
    """The dataset worker ``index`` of ``num_workers`` reads under the dataset's auto-shard policy."""
    if not isinstance(dataset, Dataset):
        raise TypeError(f"auto_shard: expected a Dataset, got {type(dataset).__name__}")
    root, _ = rewrite(dataset._node, dataset.options(), num_workers, index, log, keep_balanced)
    return Dataset(root)


# ================================================================================ the plan
@dataclass
class WorkerShare:
    index: int
    files: list | None = None  # FILE: the file names, in the (unshuffled) list order
    elements: str | None = None  # DATA / HINT: which positions, described
    positions: range | None = None  # DATA with a known cardinality: the output positions


@dataclass
class AutoShardPlan:
    num_workers: int
    requested: AutoShardPolicy
    policy: AutoShardPolicy
    reason: str
    workers: list
    notes: list = field(default_factory=list)
    complete: bool | None = None  # shares cover everything (None: cannot tell)
    disjoint: bool | None = None  # shares do not overlap (None: cannot tell)

    def __str__(self):
        lines = [f"auto-shard plan for {self.num_workers} worker(s): policy {self.policy.name} "
                 f"(requested {self.requested.name})", f"  why: {self.reason}"]
        for w in self.workers:
            if w.files is not None:
                lines.append(f"  worker {w.index}: {len(w.files)} file(s) {w.files}")
            else:
                lines.append(f"  worker {w.index}: {w.elements}")
        lines.append(f"  complete: {_tri(self.complete)}; disjoint: {_tri(self.disjoint)}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _tri(v):
    return "unknown" if v is None else ("yes" if v else "NO")


def _list_file_names(node: Node, limit: int = 100_000):
    n = node.cardinality()
    if n == INFINITE or n > limit:
        return None
    stripped, _ = _strip_shuffles(node)
    try:
        out = stripped.files()
        if out is not None:
            return [f.decode() if isinstance(f, bytes) else str(f) for f in out]
    except Exception:  # noqa: BLE001
        pass
    if n == UNKNOWN:
        return None
    try:
        return [x.decode() if isinstance(x, bytes) else str(x.item() if hasattr(x, "item") else x)
                for x in Dataset(stripped).as_numpy()]
    except Exception:  # noqa: BLE001
        return None


def _unseeded_random(root: Node) -> list[Node]:
    if random_seed.get_global_seed() is not None:
        return []
    return [n for n in graph.walk(root) if n.is_random and n.seeds is None]


def _shards_per_path(root: Node) -> tuple[int, int]:
    """(min, max) number of shard nodes on the paths from the output to each source."""
    memo: dict[int, tuple[int, int]] = {}
    for node in graph.walk(root):
        own = 1 if isinstance(node, Shard) and not node.is_hint else 0
        if not node.inputs:
            memo[id(node)] = (own, own)
        else:
            lo = min(memo[id(c)][0] for c in node.inputs)
            hi = max(memo[id(c)][1] for c in node.inputs)
            memo[id(node)] = (lo + own, hi + own)
    return memo[id(root)]


def auto_shard_plan(dataset: Dataset, num_workers: int, *, check: bool = True) -> AutoShardPlan:
    """Which policy applies and why, what each worker reads, and whether the shares are complete and
    disjoint. With ``check`` (default), raises ``AutoShardError`` on a provable gap or overlap and the FILE
    error when there are fewer files than workers."""
    if not isinstance(dataset, Dataset):
        raise TypeError(f"auto_shard_plan: expected a Dataset, got {type(dataset).__name__}")
    _check_worker(num_workers, 0)
    root = dataset._node
    d = decide(root, dataset.options())
    plan = AutoShardPlan(num_workers, d.requested, d.applied, d.reason, [])
    base_shards = _shards_per_path(root)
    if d.applied == AutoShardPolicy.FILE:
        per_point = []
        for p in d.points:
            names = _list_file_names(p.inputs[0])
            if names is not None and len(names) < num_workers and check:
                apply_file(root, num_workers, 0)  # raises the FILE error with the counts
            per_point.append(names)
        for w in range(num_workers):
            if all(n is not None for n in per_point):
                files = [f for names in per_point for f in names[w::num_workers]]
                plan.workers.append(WorkerShare(w, files=files))
            else:
                plan.workers.append(WorkerShare(w, elements=f"file names at positions {w}::{num_workers} of each "
                                                            "reader's list (not known statically)"))
        plan.complete = plan.disjoint = True
        for names in per_point:
            if names is not None and len(set(names)) != len(names):
                dup = sorted({f for f in names if names.count(f) > 1})
                plan.notes.append(f"the file list names {dup} more than once: each copy is read once, by the "
                                  "worker its position gives")
        if len(d.points) > 1:
            plan.notes.append(f"{len(d.points)} readers sharded independently (zip/concatenate branches)")
    elif d.applied == AutoShardPolicy.DATA:
        n = root.cardinality()
        for w in range(num_workers):
            if n >= 0:
                pos = range(w, n, num_workers)
                plan.workers.append(WorkerShare(w, elements=f"{len(pos)} output element(s) at positions "
                                                            f"{w}::{num_workers} of {n}", positions=pos))
            else:
                plan.workers.append(WorkerShare(w, elements=f"output elements at positions {w}::{num_workers} "
                                                            f"({'infinite' if n == INFINITE else 'unknown count'})"))
        plan.complete = plan.disjoint = True
        if 0 <= n < num_workers:
            plan.notes.append(f"only {n} output element(s) for {num_workers} workers: workers 0..{n - 1} will raise "
                              "the non-empty error before their first element (tf.data's rule)")
        rnd = _unseeded_random(root)
        if rnd and num_workers > 1:
            plan.complete = plan.disjoint = None
            plan.notes.append("unseeded random stage(s) " + ", ".join(r.label() for r in rnd) + ": every worker "
                              "draws its own order, so the shares may overlap or leave elements out; set a seed")
    elif d.applied == AutoShardPolicy.HINT:
        hinted = apply_hint(root, num_workers, 0)
        lo, hi = _shards_per_path(hinted)
        lo0, hi0 = base_shards
        for w in range(num_workers):
            plan.workers.append(WorkerShare(w, elements=f"the elements at positions {w}::{num_workers} of each "
                                                        "shard(SHARD_HINT, SHARD_HINT) placeholder's input"))
        plan.disjoint = lo > lo0 or num_workers == 1
        plan.complete = True
        if hi - hi0 > 1 and num_workers > 1:
            plan.complete = False
            plan.notes.append("a source is below two hint placeholders: it is sharded twice and most of it is read "
                              "by no worker")
        if not plan.disjoint:
            plan.notes.append("a source reaches the output without passing a hint placeholder: every worker reads "
                              "all of it")
    else:
        for w in range(num_workers):
            plan.workers.append(WorkerShare(w, elements="every element (policy OFF)"))
        plan.complete = True
        plan.disjoint = num_workers == 1
        if num_workers > 1:
            plan.notes.append("policy OFF: every worker reads the whole dataset, as requested (not checked)")
    if check and d.applied != AutoShardPolicy.OFF:
        if plan.disjoint is False:
            raise AutoShardError(f"auto-shard plan: the workers' shares overlap.\n{plan}", "auto_shard_plan")
        if plan.complete is False:
            raise AutoShardError(f"auto-shard plan: some elements are read by no worker.\n{plan}",
                                 "auto_shard_plan")
    return plan


__all__ = ["auto_shard", "auto_shard_plan", "AutoShardPlan", "AutoShardError", "rewrite",
           "decide", "find_sharding_points"]
