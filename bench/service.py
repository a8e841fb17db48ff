"""The service section: a P4-style image map with heavy per-element work, run locally and through
``jaxfeed.service`` with 1 and 2 Ray workers (``LocalService`` on 127.0.0.1), in one run.

Figures (wall clock, medians of ``repeats`` epochs after a warm-up):
- consumer rate (elements/s) with 0 (local), 1 and 2 workers, and the 2-vs-1 scaling ratio;
- the service hop's cost per element: the same pipeline with trivial work, service (1 worker) minus local,
  in microseconds per element;
- a simulated sizing, since on a 2-core machine the workers compete with the consumer: with ``w`` seconds of
  work per element (measured locally) and the hop's ``o`` seconds per element on the consumer, feeding
  ``N`` devices at ``D`` elements/s each needs ``ceil(N * D * w)`` worker cores and ``N * D * o`` of the
  consumer's core.

``python -m jaxfeed.bench.service [--images 1000]`` prints the figures as JSON (needs ray).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time

import numpy as np

SIDE = 64
WORK_ROUNDS = 12  # repetitions of P4's augment per element: the "heavy" work
SIZING = [(8, 2000.0), (8, 10000.0), (64, 2000.0)]  # (devices, elements/s per device) for the simulation


def heavy(image, rng):
    from jaxfeed.bench import workloads

    out = None
    for _ in range(WORK_ROUNDS):
        out = workloads.augment_with_rng(image, rng)
    return out


def trivial(image):
    return image


def _pipeline(images, fn, with_rng):
    from jaxfeed.pipeline import Dataset

    ds = Dataset.from_tensor_slices(images)
    return ds.map(fn, with_rng=True, seed=1) if with_rng else ds.map(fn)


def _rate(ds, count, repeats) -> float:
    list(ds)  # warm-up (and, for the service, the workers' first unpickling)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        n = sum(1 for _ in ds)
        times.append(time.perf_counter() - start)
        assert n == count, (n, count)
    return count / statistics.median(times)


def run(images: int = 2048, repeats: int = 3, split_size: int = 256) -> dict:
    import jaxfeed.service as svc

    data = np.random.default_rng(0).integers(0, 256, (images, SIDE, SIDE, 3), dtype=np.uint8)
    out = {"images": images, "side": SIDE, "work_rounds": WORK_ROUNDS, "repeats": repeats, "clock": "wall",
           "split_size": split_size}
    local_heavy = _rate(_pipeline(data, heavy, True), images, repeats)
    local_trivial = _rate(_pipeline(data, trivial, False), images, repeats)
    out["local_images_per_s"] = local_heavy
    for workers in (1, 2):
        with svc.LocalService(num_workers=workers) as service:
            mode = svc.distribute("distributed_epoch", service, split_size=split_size,
                                  max_outstanding_requests=2 * workers)
            out[f"service_{workers}_images_per_s"] = _rate(_pipeline(data, heavy, True).apply(mode), images, repeats)
            if workers == 1:
                hop = _rate(_pipeline(data, trivial, False).apply(mode), images, repeats)
                out["hop_us_per_element"] = max(0.0, (1 / hop - 1 / local_trivial) * 1e6)
    out["scaling_2_vs_1"] = out["service_2_images_per_s"] / out["service_1_images_per_s"]
    out["service_1_vs_local"] = out["service_1_images_per_s"] / local_heavy
    work = 1.0 / local_heavy
    out["work_us_per_element"] = work * 1e6
    out["sizing"] = [{"devices": n, "per_device": d, "worker_cores": math.ceil(n * d * work),
                      "consumer_core_fraction": n * d * out["hop_us_per_element"] * 1e-6} for n, d in SIZING]
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--images", type=int, default=2048)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    print(json.dumps(run(args.images, args.repeats), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
