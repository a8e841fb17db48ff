"""P7: P2's pipeline fed through ``experimental_distribute_dataset`` onto 8 forced CPU devices.

Runs in its own process (``python -m jaxfeed.bench.distributed <datadir>``), because the device count
must be in ``XLA_FLAGS`` before JAX starts; the runner sets it. The baseline is P2's hand loop plus one
``jax.device_put`` of each batch, split over the same devices; the two take turns repetition by repetition
(``runner.Runner.group``). Then the training-loop stall check (``bench/stall.py``) for each of
``--stall-batch-sizes``. Prints one JSON line after a marker.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

MARKER = "JAXFEED_P7_RESULT "
DEVICES = 8
XLA_FLAG = f"--xla_force_host_platform_device_count={DEVICES}"


def _rows(value) -> int:
    """Rows in one distributed batch: a global jax.Array, a per-replica value, or nested structures."""
    if isinstance(value, dict):
        return _rows(next(iter(value.values())))
    if isinstance(value, (tuple, list)):
        return _rows(value[0])
    arrays = getattr(value, "arrays", None)  # jaxfeed's PerReplica: count on its global arrays, as a JAX
    if arrays is not None and not getattr(value, "stacked", True):  # user would (no per-replica views)
        sizes = getattr(value, "sizes", None)
        return int(np.sum(sizes)) if sizes is not None else _rows(arrays)
    values = getattr(value, "values", None)
    if isinstance(values, (tuple, list)):  # PerReplica-like
        return sum(_rows(v) for v in values)
    return int(value.shape[0])


def _strategy():
    try:
        from jaxfeed.distribute import MirroredStrategy
    except ImportError as e:
        raise LookupError(f"jaxfeed.distribute has no MirroredStrategy yet ({e})") from None
    return MirroredStrategy()


def run(datadir, repeats, warmup, max_seconds, stall_batch_sizes=(256, 4096)) -> dict:
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from . import baselines, data, runner, suite
    from .workloads import rows_of

    d = data.Loaded(datadir)
    out = {"devices": len(jax.devices()), "runs": {}}
    mesh = Mesh(np.array(jax.devices()), ("replica",))
    sharding = NamedSharding(mesh, PartitionSpec("replica"))

    def hand():
        for batch in baselines.p2(d):
            if len(batch) % len(jax.devices()) == 0:
                yield jax.block_until_ready(jax.device_put(batch, sharding))

    contenders = {"hand loop": (hand, rows_of, len(d.rows) // 256 * 256)}
    try:
        strategy = _strategy()
    except LookupError as e:
        strategy = None
        out["runs"]["jaxfeed"] = {"kind": "jaxfeed", "status": "skipped", "reason": str(e)}
    dataset = runner.epochs_of(lambda: strategy.experimental_distribute_dataset(suite.p2(d)))

    def distributed():  # one distributed dataset, iterated once per repetition (an epoch), as P1-P6 do
        for batch in dataset():
            yield jax.block_until_ready(batch)

    if strategy is not None:
        contenders["jaxfeed"] = (distributed, _rows, len(d.rows))
    kinds = {"hand loop": "baseline", "jaxfeed": "jaxfeed"}
    measured = runner.Runner(repeats=repeats, warmup=warmup, max_seconds=max_seconds).group(contenders)
    for label, r in measured.items():  # taking turns, repetition by repetition, as every group does
        out["runs"][label] = dict(r, kind=kinds[label])
    if strategy is not None and stall_batch_sizes:
        from . import stall

        try:
            out["stall"] = stall.run(strategy, d, stall_batch_sizes, seconds=max_seconds or 2.0)
        except Exception as e:  # noqa: BLE001 - reported; the feed's figures stand
            out["stall"] = {"status": "error", "reason": runner.describe_error(e)}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m jaxfeed.bench.distributed")
    p.add_argument("datadir")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--max-seconds", type=float, default=None)
    p.add_argument("--stall-batch-sizes", default="256,4096",
                   help="global batch sizes of the training-loop stall check (bench/stall.py); '' to skip it")
    args = p.parse_args(argv)
    if XLA_FLAG not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + XLA_FLAG).strip()
    sizes = tuple(int(b) for b in args.stall_batch_sizes.split(",") if b.strip())
    out = run(args.datadir, args.repeats, args.warmup, args.max_seconds, sizes)
    sys.stdout.write(MARKER + json.dumps(out, default=float) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
