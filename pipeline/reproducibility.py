"""Does a second run of a pipeline give what the first gave? One place for the answers that checkpoints,
elastic resume and the determinism rewriter (``determinism/rewriter.py``) each need.

The facts come from the nodes (``Node.not_replayable_because``: unseeded randomness, a non-replayable
generator, a function declared ``stateful=True``; ``num_parallel_calls``/``deterministic``; ``is_source``,
``reads_files``, ``random_access``) and from ``jaxfeed.determinism``'s inspection of function bodies. The
three users ask different questions of them:

- a **checkpoint** (``external_state_reason``) asks what a saved iterator state cannot capture. A random
  stage keeps its seeds in its state, so unseeded randomness is fine there; a generator, a function
  declared or marked stateful are not. Function bodies are not inspected: reads of files replay exactly.
- **elastic resume** (``not_reproducible_because``) asks whether the pipeline's output is one fixed sequence
  in every run, and whether a worker can reach a position without re-reading everything before it.
- the **determinism rewriter** (``function_reports``, ``unseeded``) asks which functions keep hidden state
  (run them serially) and which random stages lack seeds.
"""

from __future__ import annotations

from .nodes.generator import Generator
from .options import effective_deterministic

STATEFUL_MARK = "__jaxfeed_stateful__"  # set on a function by ``@jaxfeed.determinism.stateful``


def unseeded(node) -> bool:
    """A random stage without seeds: each run draws another order."""
    return node.is_random and node.seeds is None


def runs_in_varying_order(node, options) -> bool:
    """A parallel stage allowed to deliver in completion order (``deterministic=False``, its own or the
    options')."""
    return node.num_parallel_calls is not None and not effective_deterministic(options, node.deterministic)


def function_report(node, role: str, fn):
    """The inspection report (``jaxfeed.determinism.inspection``) for ``node``'s function ``fn`` in its
    ``role``, the node's own ``stateful=`` argument winning over what the inspection found."""
    from jaxfeed.determinism import inspection

    report = inspection.analyse(fn)
    if node.stateful is not None:
        report = inspection.Report(report.findings, bool(node.stateful))
    return report


def function_reports(node) -> dict:
    """``{role: report}`` (``function_report``) for each of ``node``'s functions."""
    return {role: function_report(node, role, fn) for role, fn in node.functions().items() if callable(fn)}


# ============================================================================================ checkpoints
def external_state_reason(node) -> str | None:
    """Why ``node`` holds state that an iterator state cannot capture, or None. The node's own ``stateful=``
    argument wins over markers on its functions (as in ``jaxfeed.determinism``)."""
    if isinstance(node, Generator):  # its position lives in the Python generator, not in the state
        if node.replayable:
            return None
        return ("runs a Python generator, whose position cannot be saved (declare "
                "from_generator(..., replayable=True) if calling it again yields the same sequence)")
    if node.stateful is not None:
        return "calls a function declared stateful=True" if node.stateful else None
    for role, fn in node.functions().items():
        if getattr(fn, STATEFUL_MARK, None) is True:
            return f"calls a {role} marked @jaxfeed.determinism.stateful"
    return None


def external_state_nodes(root) -> list:
    """Nodes whose functions hold state the iterator state cannot capture (see ``external_state_reason``):
    ``from_generator`` unless declared ``replayable=True``, nodes declared ``stateful=True`` and nodes
    calling a function marked ``@jaxfeed.determinism.stateful``."""
    from . import graph

    return [n for n in graph.walk(root) if external_state_reason(n) is not None]


# ============================================================================================ elastic resume
def not_reproducible_because(node, options, allow_replay: bool = False) -> str | None:
    """Why ``node`` keeps a pipeline from being one fixed sequence of elements in every run -- or, without
    ``allow_replay``, from being entered at a position without re-reading what comes before it -- or None."""
    why = node.not_replayable_because()
    if why is None and runs_in_varying_order(node, options):
        why = "is a parallel stage with deterministic=False: its output order varies between runs"
    if why is None and not allow_replay:
        if node.is_source and not node.random_access() and not node.inputs:
            why = ("is a streaming source: a restored worker would re-read every element before its first "
                   "position (pass allow_replay=True to accept that)")
        elif node.reads_files:
            why = ("reads files as a stream: a restored worker would re-read every element before its first "
                   "position (pass allow_replay=True to accept that)")
    if why is None and node.stateful is not False:
        why = _hidden_state(node)
    return why


def _hidden_state(node) -> str | None:
    """Why a node's functions look stateful to ``jaxfeed.determinism``'s inspection, if they do."""
    for role, report in function_reports(node).items():
        if report.stateful or report.unimplemented:
            found = report.reason() or "; ".join(str(f) for f in report.unimplemented[:3])
            return (f"has a {role} that is not a pure function ({found}); declare stateful=False if it is one "
                    "after all")
    return None
