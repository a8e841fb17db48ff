"""Small helpers the engine tests share: AUTOTUNE budgets, a slow function, the iterator under the root."""

import time

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
