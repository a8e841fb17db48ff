"""Soak: a long run keeps a flat resident set (``-m slow``; JAXFEED_SOAK_SECONDS, default 600)."""

import os
import time

import numpy as np
import psutil
import pytest

from jaxfeed.pipeline import AUTOTUNE, Dataset


def augment(img, rng):
    if rng.random() < 0.5:
        img = img[:, ::-1]
    return (img.astype(np.float32) - 127.5) / 127.5


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["thread", "process"])
def test_soak_resident_memory_stays_flat(executor):
    seconds = float(os.environ.get("JAXFEED_SOAK_SECONDS", 600)) / 2
    images = np.random.default_rng(0).integers(0, 255, (2000, 64, 64, 3), dtype=np.uint8)
    ds = (Dataset.from_tensor_slices(images).repeat()
          .map(augment, num_parallel_calls=AUTOTUNE, with_rng=True, seed=1, executor=executor)
          .batch(128).prefetch(AUTOTUNE))
    proc = psutil.Process()
    samples = []
    it = iter(ds)
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        for _ in range(20):
            next(it)
        samples.append(proc.memory_info().rss)
    it.close()
    quarter = max(1, len(samples) // 4)
    early, late = max(samples[quarter:2 * quarter]), max(samples[-quarter:])
    assert late <= early * 1.05 + (16 << 20), f"RSS grew from {early >> 20} MiB to {late >> 20} MiB"
