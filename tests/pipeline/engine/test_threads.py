"""Thread-parallel map: blocks in flight."""

import threading
import time

from jaxfeed.pipeline import Dataset
from jaxfeed.pipeline.testing import assert_resumes_everywhere

from engine_test_helpers import budget, root_iterator


def test_parallel_map_bounds_blocks_in_flight():
    started = []
    gate = threading.Event()

    def blocked(x):
        if x == 0:  # the first call runs on the consumer, before the pool starts
            return x
        started.append(int(x))
        gate.wait(5)
        return x

    it = iter(Dataset.range(10_000).map(blocked, num_parallel_calls=2).with_options(budget()))
    assert int(next(it)) == 0
    t = threading.Thread(target=lambda: next(it), daemon=True)
    t.start()
    while len(started) < 2:
        time.sleep(0.001)
    time.sleep(0.05)  # give an unbounded dispatcher the chance to misbehave (not a threshold on our speed)
    gate.set()
    t.join(5)
    assert len(root_iterator(it)._inflight) <= 4
    it.close()


def test_parallel_map_resumes_with_blocks_in_flight():
    assert_resumes_everywhere(lambda: Dataset.range(30).map(lambda x: x * 2, num_parallel_calls=3)
                              .with_options(budget()), ks=[0, 1, 7, 29, 30])
