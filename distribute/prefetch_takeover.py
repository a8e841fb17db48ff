"""The distributed iterator's prefetch to the devices takes the place of the pipeline's own last prefetch.

A pipeline ported from tf.data ends in ``prefetch(AUTOTUNE)``; distributed, its worker graph is
``Shard(Rebatch(Prefetch(...)))`` and the distributed iterator runs a second producer thread that places steps
on the devices. Two producer threads in a row hand every step over twice, and on a machine with few cores each
hand-off is a fight for the GIL (measured on P7, 8 CPU devices, 2 cores: ~50 us of CPU per step for the
pipeline's thread alone). So when the distributed iterator starts its thread over a single pipeline whose
output stage is a prefetch -- reached from the root through the stages distribution adds, which read their
input synchronously -- that prefetch reads its input on the distributed iterator's thread from then on
(``PrefetchIterator.serve_on_caller``): one producer thread, one hand-off per step. The run-ahead is what it
was: ``experimental_per_replica_buffer_size`` steps on the devices, and while those are ready the distributed
iterator's thread reads ahead into the prefetch's buffer (``PrefetchIterator.read_ahead``, up to its capacity,
AUTOTUNE growing it by the prefetch's own rule). When that read-ahead had filled the buffer and then could not
keep it filled (the one thread has the input's work and the placement's on the same time slices: a training
loop on a busy 2-core machine stalled 2-4x longer that way), the prefetch gets its own thread back for good:
the steps still cross two thread boundaries then, as before. Values, order and the pipeline's state (its form
included) are unchanged either way.

Measured (same process alternating, 2 cores shared with other work; ``python -m jaxfeed.bench --only P7`` at
load ~3 gave 1.02x the hand loop, stall 1.3% / 1.8%): P7's drain loop, CPU per step with one thread for good
299 us, with the give-back 304, the old way's two threads 361, hand loop 282 (the give-back fires in most
epochs of the drain loop: the read-ahead fills during a transient, then the faster consumer empties it). Without
the give-back the stall check got 2-4x worse under heavy load (5.5% vs 1.7% at batch 4096, 4.5% vs 1.8% at 256,
load 5; level at load 3), likely the CPU share: one producer thread against the step's XLA threads and other
processes gets less than two did. Signals counted (load ~3, no give-back): "the read-ahead had filled the
buffer and the thread then read on demand while the consumer still had a step waiting" happened 1-3 times in
a drain epoch of 3,907 steps and 5-8 times in 250-380 steps of the training loop, so a rate rule (events per
step read) could tell the two apart; "read on demand while a step waits", without the fill, was ~53% of the
on-demand reads in both. A rate rule was not calibrated here (one busy machine): the give-back stays at the
first event.

Not taken over: several pipelines (``distribute_datasets_from_function`` per replica: each prefetch keeps
overlapping its own pipeline with the others'), a prefetch whose thread already started
(``Options.experimental_warm_start``), or any other stage between the root and the prefetch. Without a
distributed prefetch thread (buffer size 0, determinism with a stateful function) the pipeline's prefetch is
left as it is: it is then the only overlap.
"""

from __future__ import annotations

from jaxfeed.pipeline.iterators.prefetch import PrefetchIterator
from jaxfeed.pipeline.nodes.shard import Shard

from .rebatch import BalancedRebatch, LegacyRebatch

# the stages a distributed dataset puts above the user's pipeline (each reads its input on the caller's thread)
_ADDED_BY_DISTRIBUTION = (Shard, BalancedRebatch, LegacyRebatch)


def output_prefetch(root):
    """The ``PrefetchIterator`` of the pipeline's output stage under the stages distribution added above it,
    else None."""
    it = root
    while it is not None and isinstance(it.node, _ADDED_BY_DISTRIBUTION):
        children = it.children()
        it = children[0] if len(children) == 1 else None
    return it if isinstance(it, PrefetchIterator) else None


def take_over(dataset_iterators, park: bool = False):
    """Make the single pipeline's output prefetch (if any) read on its caller's thread; that
    ``PrefetchIterator`` if it does, else None. ``park``: also when its own thread has started (it parks)."""
    if len(dataset_iterators) != 1:
        return None
    prefetch = output_prefetch(dataset_iterators[0].root_iterator)
    return prefetch if prefetch is not None and prefetch.serve_on_caller(park) else None
