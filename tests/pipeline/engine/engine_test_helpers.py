"""Small helpers the engine tests share: AUTOTUNE budgets, a slow function, the iterator under the root, a
fake clock moved by a stage's work, this process's map workers."""

import threading
import time

import psutil

from jaxfeed.pipeline import Options


def budget(cpus=None, ram=None, enabled=None):
    opts = Options()
    opts.autotune.cpu_budget = cpus
    opts.autotune.ram_budget = ram
    opts.autotune.enabled = enabled
    opts.experimental_optimization.map_and_batch_fusion = False
    return opts


def slow(x):
    time.sleep(0.002)
    return x


def root_iterator(it):
    inner = it._it
    return getattr(inner, "inner", inner)


class WorkClock:
    """Fake time that passes only as a stage works: each unit of work (a mapped call, an inner read) takes
    ``cost / parallelism`` of it -- work that more threads do faster (I/O) -- however fast or loaded the
    machine is; the tuner never sees wall time. The consumer's waits, timed on this clock too, are the work
    done while it was blocked. Set ``stage`` to the iterator whose ``parallelism`` divides the cost (at 0 the
    consumer does the work itself, as one thread would)."""

    def __init__(self, cost):
        self.now, self.cost, self.stage = 0.0, cost, None
        self.lock = threading.Lock()

    def __call__(self):
        with self.lock:
            return self.now

    def work(self):
        with self.lock:
            self.now += self.cost / max(1, self.stage.parallelism)


def map_workers():
    """This process's map workers: children of the (long-lived) forkserver, or direct children that are neither
    the forkserver nor the resource tracker -- nor the interleave workers this process keeps
    (``engine/remote_inner.py``: shared by every interleave, kept between iterators)."""
    from jaxfeed.pipeline.engine import remote_inner

    kept = remote_inner.wait_started()
    kept = set() if kept is None else {p.pid for p in kept.procs}
    out = []
    for child in psutil.Process().children():
        command = " ".join(child.cmdline())
        if "forkserver" in command:
            out.extend(c for c in child.children() if c.pid not in kept)
        elif "resource_tracker" not in command and child.pid not in kept:
            out.append(child)
    return out
