"""jaxfeed.service on one machine: an embedded Ray instance with 2 worker actors runs a heavy map, the
consumer here receives every element once, in order, and checks it (needs ``pip install -e ".[service]"``).

    python examples/service_demo.py [--workers 2] [--elements 10000]

On a Ray cluster: ``jaxfeed.service.start(num_workers=N, address="auto")`` once, then
``service.distribute("distributed_epoch", "ray://head:10001")`` in each consumer.
"""

from __future__ import annotations

import argparse

import numpy as np


def augment(x, rng):
    """Work that needs a worker: per-element randomness, keyed on the element's position (reproducible)."""
    noise = rng.normal(size=256).astype(np.float32)
    return np.float32(x) + np.float32(np.sort(noise)[128] * 0)  # the sort is the "work"; the value stays x


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--elements", type=int, default=10_000)
    args = p.parse_args(argv)

    import jaxfeed.service as service
    from jaxfeed.pipeline import Dataset

    with service.LocalService(num_workers=args.workers) as svc:
        ds = (Dataset.range(args.elements)
              .map(augment, with_rng=True, seed=1)
              .apply(service.distribute("distributed_epoch", svc, split_size=1000))
              .batch(256))
        values = np.concatenate([b for b in ds])
    assert values.tolist() == list(range(args.elements)), "every element once, in order"
    print(f"{len(values)} elements from {args.workers} workers, each once, in order")


if __name__ == "__main__":
    main()
