"""Peak memory of one jaxfeed pipeline, measured in a fresh process (``python -m jaxfeed.bench.memory P3 <datadir>``).

A fresh process, because in the main one the allocator keeps pages from earlier runs, so a pipeline's
own peak would hide. The input data is loaded and the Dataset built first; then the kernel's RSS
high-water mark is reset and one epoch (or ``--max-seconds`` of it) runs. Prints one JSON line after a
marker: ``rss_before``, ``rss_peak``, ``rss_delta`` (bytes, this process; worker processes, as P5 starts,
are not counted).
"""

from __future__ import annotations

import argparse
import json
import sys

MARKER = "JAXFEED_MEMORY_RESULT "


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m jaxfeed.bench.memory")
    p.add_argument("pipeline")
    p.add_argument("datadir")
    p.add_argument("--max-seconds", type=float, default=None)
    args = p.parse_args(argv)
    from . import data, suite, timing

    d = data.Loaded(args.datadir)
    spec = suite.PIPELINES[args.pipeline]
    out = {}
    try:
        ds = spec.make(d, None)
        it = iter(ds)  # one batch first: lazy imports, element specs, pools
        next(it, None)
        it.close()
        before = timing.rss_bytes()
        reset = timing.reset_peak_rss()
        timing.once(lambda: ds, args.max_seconds)
        peak = timing.rss_bytes("VmHWM")
        out = {"status": "ok", "rss_before": before, "rss_peak": peak, "reset": reset,
               "rss_delta": max(0, peak - before) if reset else None}
    except Exception as e:  # noqa: BLE001
        from .runner import describe_error, missing_part

        missing = missing_part(e)
        out = {"status": "skipped" if missing else "error", "reason": missing or describe_error(e)}
    sys.stdout.write(MARKER + json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
