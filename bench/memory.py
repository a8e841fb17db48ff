"""Peak memory of one jaxfeed pipeline, measured in a fresh process (``python -m jaxfeed.bench.memory P3 <datadir>``).

A fresh process, because in the main one the allocator keeps pages from earlier runs, so a pipeline's
own peak would hide. The input data is loaded and the Dataset built first; then the kernel's RSS
high-water mark is reset and one epoch (or ``--max-seconds`` of it) runs. Prints one JSON line after a
marker: ``rss_before``, ``rss_peak``, ``rss_delta`` (bytes, this process) and ``workers_delta``: what the
worker processes it started (P5's map, interleaved generators) grew by, summed over them -- each one's
private memory (``RssAnon``: their shared-memory slabs are counted where the consumer maps them), its peak
over samples every ``SAMPLE_SECONDS`` less what it had when first seen (a worker starts as a fork of the
forkserver). The target judges the two together.
"""

from __future__ import annotations

import argparse
import json
import sys

MARKER = "JAXFEED_MEMORY_RESULT "
SAMPLE_SECONDS = 0.005


def _private_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _descendants() -> list:
    try:
        import psutil
    except ImportError:
        return []
    try:
        return [p.pid for p in psutil.Process().children(recursive=True)]
    except psutil.Error:
        return []


class WorkerMemory:
    """Samples the private memory of this process's descendants on a thread of its own: ``delta`` is the
    sum over them of (peak - first seen). A descendant that is only a forkserver stays at its first value."""

    def __init__(self):
        import threading

        self.first: dict = {}
        self.peak: dict = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="memory-sampler")

    def __enter__(self):
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample()

    def _run(self):
        while not self._stop.wait(SAMPLE_SECONDS):
            self._sample()

    def _sample(self):
        for pid in _descendants():
            got = _private_bytes(pid)
            if got is None:
                continue
            self.first.setdefault(pid, got)
            self.peak[pid] = max(self.peak.get(pid, 0), got)

    @property
    def delta(self) -> int:
        return sum(max(0, self.peak[pid] - self.first[pid]) for pid in self.first)


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
        with WorkerMemory() as workers:
            timing.once(lambda: ds, args.max_seconds)
        peak = timing.rss_bytes("VmHWM")
        out = {"status": "ok", "rss_before": before, "rss_peak": peak, "reset": reset,
               "rss_delta": max(0, peak - before) if reset else None, "workers_delta": workers.delta,
               "workers": len(workers.first)}
    except Exception as e:  # noqa: BLE001
        from .runner import describe_error, missing_part

        missing = missing_part(e)
        out = {"status": "skipped" if missing else "error", "reason": missing or describe_error(e)}
    sys.stdout.write(MARKER + json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
