"""Memory bound: with large elements, the growth of peak RSS while iterating stays under 2x the bytes the
pipeline's buffers can hold in flight (computed from the buffer sizes and the element size).

Each case runs in a fresh interpreter, so the measurement sees only that pipeline. The baseline is the RSS
right before iterating (data built, pipeline constructed); the peak is the high-water mark of the resident
set (reset to the baseline first where the kernel allows, else the process's lifetime peak, which can only
overstate the growth). The consumer is slower than the producers, so every buffer fills to its maximum.
This is a bound on memory, not a timing threshold: an unbounded buffer fails it (the cases hold several
times the bound's worth of data in total), a bounded one passes whatever the machine's speed.
"""

import json
import subprocess
import sys

import pytest

MiB = 1 << 20
ELEMENT = 4 * MiB

# Bytes in flight, per case, from the engine's documented buffer bounds (``E`` = element bytes):
#   prefetch(P)          up to 2 x P elements: the consumer's share (``_local``) plus a refilled buffer
#                        (the producer's block in progress counts inside the buffer's room) -- prefetch.py
#   map(f).batch(B)      (fused, MapBatch) while a batch is built: its B mapped rows and the batch array;
#                        with num_parallel_calls=k, up to 2k batches in flight, k of them being built
#   map(f, npc=k)        the delivered block plus 2k blocks in flight (blocks of 1 element here: f takes
#                        over TARGET_TASK_SECONDS per element) -- parallel_map.py
#   the consumer         one element (batch) in its hands
CASES = {
    # from_tensor_slices(index).map(make).batch(4).prefetch(8), fused into MapBatch (sequential)
    "map_batch_prefetch": dict(elements=480, batch=4, npc=None, prefetch=8, fuse=True, delay=0.012,
                               bound_batches=2 * 8 + 2 + 1),
    # from_tensor_slices(index).map(make, num_parallel_calls=2).prefetch(8): plain parallel map
    "parallel_map_prefetch": dict(elements=150, batch=None, npc=2, prefetch=8, fuse=False, delay=0.006,
                                  bound_batches=2 * 8 + (2 * 2 + 1) + 1),
    # from_tensor_slices(index).map(make, num_parallel_calls=2).batch(4).prefetch(4), fused and parallel
    "parallel_map_batch_prefetch": dict(elements=320, batch=4, npc=2, prefetch=4, fuse=True, delay=0.012,
                                        bound_batches=2 * 4 + (2 * 2 + (2 * 2 - 2)) + 1),
}

SCRIPT = r"""
import json, sys, threading, time
import numpy as np
from jaxfeed.pipeline import Dataset, Options

cfg = json.loads(sys.argv[1])
ELEMENT = cfg["element"]
slow = cfg["npc"] is not None

made = []

def make(i):
    made.append(i)
    a = np.empty(ELEMENT // 8, np.float64)
    a.fill(float(i))  # touch every page: the bytes are resident
    if slow:
        time.sleep(0.001)  # over TARGET_TASK_SECONDS per element: the parallel map sends blocks of one
    return a

def status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)

options = Options()
options.experimental_optimization.map_and_batch_fusion = cfg["fuse"]
options.autotune.enabled = False
index = np.arange(cfg["elements"], dtype=np.int64)
ds = Dataset.from_tensor_slices(index).map(make, num_parallel_calls=cfg["npc"])
if cfg["batch"]:
    ds = ds.batch(cfg["batch"])
ds = ds.prefetch(cfg["prefetch"]).with_options(options)
if cfg.get("unbounded"):  # self-check: a prefetch that ignores its capacity must fail the bound
    from jaxfeed.pipeline.iterators import prefetch
    prefetch.PrefetchIterator.capacity = property(lambda self: 1 << 30, lambda self, v: None)
it = iter(ds)

baseline = status("VmRSS")
try:  # reset the resident high-water mark to the current RSS (Linux >= 4.0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    reset = True
except OSError:
    reset = False
count = 0
for batch in it:
    count += 1
    time.sleep(cfg["delay"])  # a slow consumer: every buffer fills up
    if cfg.get("unbounded") and count == 1:  # the self-check must not depend on the producers' speed on a
        deadline = time.monotonic() + 60      # busy machine: let them run ahead until most elements are made
        while len(made) < cfg["elements"] * 2 // 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    del batch
peak = status("VmHWM")
it.close()
print(json.dumps({"baseline": baseline, "peak": peak, "reset": reset, "count": count}))
"""


def measure(case, **extra):
    cfg = dict(CASES[case], element=ELEMENT, **extra)
    proc = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(cfg)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    per_batch = ELEMENT * (cfg["batch"] or 1)
    bound = cfg["bound_batches"] * per_batch
    total = ELEMENT * cfg["elements"]
    return result, bound, total


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
@pytest.mark.parametrize("case", list(CASES))
def test_peak_rss_growth_stays_under_twice_the_bytes_in_flight(case):
    result, bound, total = measure(case)
    growth = result["peak"] - result["baseline"]
    assert result["count"] == CASES[case]["elements"] // (CASES[case]["batch"] or 1)
    assert total > 3 * bound  # meaningful: holding everything would break the bound
    assert growth < 2 * bound, (f"{case}: peak RSS grew by {growth / MiB:.0f} MiB, over 2 x the "
                                f"{bound / MiB:.0f} MiB the buffers may hold ({result})")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_the_measurement_catches_an_unbounded_prefetch():
    # the same measurement with a prefetch that ignores its capacity: the bound must catch it
    result, bound, _ = measure("parallel_map_prefetch", unbounded=True)
    assert result["peak"] - result["baseline"] > 2 * bound
