"""A first demo: one pipeline on synthetic data, its graph and its throughput (grown into P1-P7 later)."""

from __future__ import annotations

import time


def main(argv) -> int:
    import numpy as np

    from jaxfeed.pipeline import Dataset

    x = np.random.default_rng(0).random((200_000, 32), dtype=np.float32)
    ds = Dataset.from_tensor_slices(x).shuffle(10_000, seed=0).batch(256).prefetch(2)
    print(ds.explain())
    t0 = time.perf_counter()
    rows = sum(len(b) for b in ds)
    dt = time.perf_counter() - t0
    print(f"\n{rows} rows in {dt:.3f} s: {rows / dt / 1e6:.2f} M rows/s")
    return 0
