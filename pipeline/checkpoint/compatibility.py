"""Does a state belong to this pipeline, and may this pipeline's state be saved at all?

- Saving: ``check_external_state`` applies ``Options.experimental_external_state_policy`` to the nodes
  whose state a saved iterator state cannot capture (``reproducibility.external_state_reason``), and
  ``graph_signature`` lists every node's fingerprint and label, saved with the state.
- Restoring: ``accept`` takes what the user passed (a state dict, or the bytes of a state file), checks its
  envelope -- version, the graph fingerprint, the iteration key -- and refuses a state of another pipeline
  with ``FailedPreconditionError`` naming the first differing node (``describe_difference``).
"""

from __future__ import annotations

import logging

from .. import graph
from ..errors import FailedPreconditionError, InvalidArgumentError
from ..options import ExternalStatePolicy
from ..reproducibility import external_state_nodes, external_state_reason
from .format import deserialize

log = logging.getLogger("jaxfeed")

STATE_VERSION = 1  # of the state dict ``DatasetIterator.get_state`` returns (the file format has its own)


# =============================================================================================== restoring
def accept(state, root, fingerprint: str) -> dict:
    """The state dict to restore an iterator over the graph ``root`` (whose fingerprint is ``fingerprint``)
    from: ``state`` itself, or decoded from the bytes of ``format.serialize``. Raises InvalidArgumentError
    for something that is not a state of this jaxfeed, FailedPreconditionError for another pipeline's."""
    if isinstance(state, (bytes, bytearray, memoryview)):
        state = deserialize(state)
    if not isinstance(state, dict) or "root" not in state:
        raise InvalidArgumentError("Iterator state is not a jaxfeed iterator state (no 'root' entry).",
                                   "set_state")
    if state.get("version") != STATE_VERSION:
        raise InvalidArgumentError(f"Iterator state has version {state.get('version')!r}; this jaxfeed "
                                   f"reads version {STATE_VERSION}.", "set_state")
    if state.get("fingerprint") != fingerprint:
        where = describe_difference(state.get("nodes"), root)
        raise FailedPreconditionError(
            "Iterator state was saved from a different pipeline (graph fingerprint "
            f"{state.get('fingerprint')} vs {fingerprint}; {where}); refusing to restore.", where)
    iteration = state.get("iteration", 0)
    if type(iteration) is not int or iteration < 0:  # a state file is outside input: check before int()
        raise InvalidArgumentError(f"Iterator state has iteration {iteration!r:.60}; expected an integer >= 0.",
                                   "set_state")
    return state


def graph_signature(root) -> list:
    """``[[fingerprint, label], ...]`` of every node, sources first (``graph.walk`` order): saved with the
    state so that restoring into another pipeline can name the first node that differs."""
    memo, out = {}, []
    for node in graph.walk(root):
        fp = graph.node_fingerprint(node, [memo[id(i)] for i in node.inputs])
        memo[id(node)] = fp
        label = node.label()
        out.append([fp, label if len(label) <= 160 else label[:157] + "..."])
    return out


def describe_difference(saved, root) -> str:
    """Where a saved graph signature and the graph at ``root`` part: the first node, from the sources up,
    whose fingerprint differs."""
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


# =============================================================================================== saving
def check_external_state(root, options) -> None:
    """Apply ``Options.experimental_external_state_policy`` when a state is saved.

    Unset or FAIL (tf.data's default) raises ``FailedPreconditionError`` naming the node: a restore would
    re-run the stateful function or generator and could resume with other data. WARN logs a warning once
    per pipeline and saves; IGNORE saves silently. A generator the user declares replayable
    (``from_generator(..., replayable=True)``: calling it again yields the same sequence) is not external
    state: a restore calls it again and skips what was consumed, which is exact.
    """
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
