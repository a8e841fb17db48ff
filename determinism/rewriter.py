"""The deterministic-mode rewriter: a graph pass in the ``determinism`` phase (tf.data's make_deterministic).

It runs every time an iterator is created and returns at once when determinism is off. When it is on:

1. **Order flags**: ``Options.deterministic`` and every node's ``deterministic`` argument become True.
2. **Seeds**: a random transformation (``node.is_random``) without seeds -- no op seed and no global seed
   when it was built -- raises ``RuntimeError`` telling the user to call ``set_random_seed``. (The same check
   runs at construction for nodes built while determinism is on; this pass catches the ones built before.)
3. **Operations with no deterministic implementation** (OS entropy, clocks, generators built without a
   seed inside the function) raise ``UnimplementedError`` naming the operation and the node.
4. **Stateful functions** (see ``inspection.py``; the user's ``stateful=`` flag wins) run serially: the node's
   ``num_parallel_calls`` is dropped. Per-element RNG maps (``with_rng=True``) are stateless and stay parallel.
5. **Asynchrony around stateful functions**: every asynchronous stage *downstream* of a stateful node --
   prefetch, and parallel map/interleave/batch, which pull from their input ahead of the consumer -- is
   made synchronous (prefetch removed, ``num_parallel_calls`` dropped), so the stateful function runs on the
   consumer's thread exactly when its element is asked for, in a fixed order relative to any other code
   that shares its state (another stateful stage, the training loop's own use of ``numpy.random``). Stages
   upstream of every stateful node keep their parallelism.

Each change is written to the pass log (``Dataset.explain()``, ``iterator.rewrites``) and to the
``jaxfeed.determinism`` logger at INFO, naming the node and the reason.
"""

from __future__ import annotations

import logging

from ..pipeline import graph, passes
from ..pipeline.errors import UnimplementedError
from ..pipeline.nodes.interleave import Interleave
from ..pipeline.reproducibility import function_report, unseeded  # noqa: F401  (function_report: public here)
from ..pipeline.reproducibility import function_reports as node_reports
from . import config

logger = logging.getLogger("jaxfeed.determinism")

SEED_MESSAGE = config.SEED_MESSAGE


def check_seeds(node) -> None:
    if unseeded(node):
        raise RuntimeError(SEED_MESSAGE.format(what=node.label()))


def is_parallel(node) -> bool:
    return node.num_parallel_calls is not None


def make_deterministic(root, options, log):
    if not config._enabled:
        return root
    if options.deterministic is False:
        log.current = "make_deterministic"
        _note(log, root, "Options.deterministic=False overridden to True (determinism is enabled)")
    options.deterministic = True

    stateful_below: dict[int, str] = {}  # node id -> why it (or something below it) is stateful

    def rewrite(node):
        check_seeds(node)
        reports = node_reports(node)
        for role, report in reports.items():
            for finding in report.unimplemented:
                raise UnimplementedError(
                    f"{node.label()}: {role} uses {finding.what}, which has no deterministic implementation "
                    f"(found at {finding.where}). With determinism enabled, use map(..., with_rng=True) for "
                    "randomness, pass a seed, or declare the function stateful=False if the value does not "
                    "affect the output.", node.kind)
        own = "; ".join(f"{role}: {r.reason()}" for role, r in reports.items() if r.stateful)
        below = next((stateful_below[id(i)] for i in node.inputs if id(i) in stateful_below), None)
        changes = {}
        if node.deterministic is False:
            changes["deterministic"] = True
            _note(log, node, "deterministic=False forced to True (determinism is enabled)")
        new = node
        if own and is_parallel(node):
            changes["num_parallel_calls"] = None
            _note(log, node, f"runs serially: its function is stateful ({own})")
        elif below and is_parallel(node):
            changes["num_parallel_calls"] = None
            _note(log, node, f"runs serially: a stateful function below it ({below}) must run on the consumer's "
                             "thread, not ahead of it")
        if (changes.get("num_parallel_calls", 0) is None and isinstance(node, Interleave)
                and node.cycle_length in (None, -1)):
            # interleave's default cycle follows num_parallel_calls: keep the cycle, so the order is kept
            changes["cycle_length"] = node.cycle
        if changes:
            new = node.replace(**changes)
        if below and node.runs_ahead():
            _note(log, node, f"prefetch removed: a stateful function below it ({below}) must not run on a "
                             "background thread")
            new = node.inputs[0] if node.inputs else node
        why = (f"{node.label()}: {own}" if own else None) or below
        if why:
            stateful_below[id(new)] = why
        return new

    return graph.transform(root, rewrite)


def _note(log, node, why):
    log.note(node, why)
    logger.info("make_deterministic: %s: %s", node.label(), why)


def explain_decisions(dataset) -> list[dict]:
    """The rewriter's view of each node, sources first: is it random/seeded, which functions are stateful
    and why, and whether it is parallel. Works whether determinism is on or off (nothing is raised)."""
    out = []
    for node in graph.walk(dataset._node):
        reports = node_reports(node)
        out.append({"node": node.label(), "kind": node.kind, "random": bool(node.is_random),
                    "seeded": node.seeds is not None,
                    "parallel": is_parallel(node),
                    "stateful": {role: r.reason() for role, r in reports.items() if r.stateful},
                    "unimplemented": {role: [str(f) for f in r.unimplemented] for role, r in reports.items()
                                      if r.unimplemented}})
    return out


passes.register("determinism", "make_deterministic", make_deterministic)


def stateful_reason(root) -> str | None:
    """Why a graph must be consumed synchronously under determinism (a stateful function somewhere), or
    None. For consumers outside the graph that would read it on a background thread (the distributed
    iterator's device prefetch): with determinism on and a reason here, read on the caller's thread."""
    if not config._enabled:
        return None
    for node in graph.walk(root):
        for role, report in node_reports(node).items():
            if report.stateful:
                return f"{node.label()}: {role}: {report.reason()}"
    return None
