"""Auto-shard as a rewrite pass: the ``AutoShard`` node and the pass of ``run_passes``' ``auto_shard`` phase.

A distributed dataset gives each worker the graph ``AutoShard(rebatched, num_workers, index)``. When an
iterator is made (or ``explain()`` runs), the passes run in their documented order -- options, auto_shard,
determinism, optimizations -- and the ``auto_shard`` pass below replaces each ``AutoShard`` node by that
worker's share (``auto_sharding.rewrite``: FILE, DATA, HINT or OFF from the effective options), noting what
it changed in the pass log, so ``explain()`` and the iterator's ``rewrites`` show it. tf.data works the same
way: ``experimental_distribute_dataset`` wraps the dataset in an ``AutoShardDataset`` op that its graph
rewriter expands.

The graph's fingerprint (saved in every iterator state) is the one of the share the node expands to
(``AutoShard.fingerprint_as``): the same as when distributing rewrote the graph at once, so states saved then
still restore, and one worker's state is refused by another worker's iterator.
"""

from __future__ import annotations

import weakref

from jaxfeed.pipeline import graph
from jaxfeed.pipeline.nodes.base import UNKNOWN, Node
from jaxfeed.pipeline.passes.options_pass import effective_options
from jaxfeed.pipeline.passes.registry import register

from .auto_sharding import rewrite


class AutoShard(Node):
    """Placeholder for worker ``index`` of ``num_workers``'s share of its input, expanded by the pass below
    (it never runs itself). ``keep_balanced``: DATA sharding keeps the balanced per-replica split."""

    kind = "AutoShard"

    def __init__(self, input_node: Node, num_workers: int, index: int, keep_balanced: bool = False,
                 expansion: Node | None = None):
        super().__init__((input_node,))
        self.num_workers, self.index, self.keep_balanced = int(num_workers), int(index), bool(keep_balanced)
        if expansion is not None:  # the rewrite already made under the graph's options (not recomputed)
            _expansions[self] = expansion

    def params(self):
        return {"num_workers": self.num_workers, "index": self.index, "keep_balanced": self.keep_balanced}

    def compute_spec(self):
        return self.inputs[0].element_spec  # sharding keeps elements whole; the rebatch below decided the spec

    def cardinality(self):
        return UNKNOWN  # known only once the policy is applied (at iteration)

    def fingerprint_as(self) -> Node:
        """The share it expands to under the options attached in its graph (what the pass applies when an
        iterator is given no options): a worker's states keep the fingerprint they had when distributing a
        dataset rewrote its graph at once, and workers' fingerprints still differ."""
        expanded = _expansions.get(self)
        if expanded is None:
            expanded = rewrite(self.inputs[0], effective_options(self), self.num_workers, self.index, None,
                               self.keep_balanced, warn=False)[0]
            _expansions[self] = expanded
        return expanded


_expansions: "weakref.WeakKeyDictionary[AutoShard, Node]" = weakref.WeakKeyDictionary()  # nodes never change


def auto_shard(root: Node, options, log) -> Node:
    """The ``auto_shard`` phase: every ``AutoShard`` node becomes its worker's share. The policy's warning
    (AUTO falling back to DATA) was given once, when the dataset was distributed; not again per iterator."""
    def expand(node: Node) -> Node:
        if isinstance(node, AutoShard):
            return rewrite(node.inputs[0], options, node.num_workers, node.index, log, node.keep_balanced,
                           warn=False)[0]
        return node

    return graph.transform(root, expand)


register("auto_shard", "auto_shard", auto_shard)
