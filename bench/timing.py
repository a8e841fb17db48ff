"""Timing one pipeline: a warm-up, then N repetitions; elements/s as min / median / max.

Standard library only (the peer interpreters import it too). A repetition runs one epoch, or stops
early once ``max_seconds`` have passed (slow pipelines are measured on a prefix of the epoch: the rate
of a steady pipeline does not depend on how long it runs). The time to the first batch is measured
from the call that builds the iterator to the arrival of its first batch.
"""

from __future__ import annotations

import os
import statistics
import time

from .workloads import rows_of


def measure(make_iterable, repeats=5, warmup=1, max_seconds=None, count=rows_of):
    """Run ``make_iterable()`` to exhaustion ``warmup + repeats`` times; return figures of the timed runs."""
    runs = []
    for r in range(warmup + repeats):
        t0 = time.perf_counter()
        it = iter(make_iterable())
        first = None
        n = 0
        try:
            for batch in it:
                if first is None:
                    first = time.perf_counter() - t0
                n += count(batch)
                if max_seconds is not None and time.perf_counter() - t0 > max_seconds:
                    break
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()
        dt = time.perf_counter() - t0
        if r >= warmup:
            runs.append({"elements": n, "seconds": dt, "first_batch_s": first})
    return summarize(runs)


def summarize(runs):
    rates = [r["elements"] / r["seconds"] for r in runs if r["seconds"] > 0]
    firsts = [r["first_batch_s"] for r in runs if r["first_batch_s"] is not None]
    return {
        "median": statistics.median(rates) if rates else 0.0,
        "min": min(rates) if rates else 0.0,
        "max": max(rates) if rates else 0.0,
        "first_batch_s": statistics.median(firsts) if firsts else None,
        "elements": [r["elements"] for r in runs],
        "seconds": [round(r["seconds"], 4) for r in runs],
    }


# ---------------------------------------------------------------------------------------------- memory
def reset_peak_rss() -> bool:
    """Reset the kernel's high-water mark of this process's RSS (Linux); False where unsupported."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def rss_bytes(field="VmRSS"):
    """This process's current RSS (``VmRSS``) or its high-water mark (``VmHWM``), in bytes; None if unknown."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    if field == "VmHWM":
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    try:
        import psutil
        return psutil.Process(os.getpid()).memory_info().rss
    except ImportError:
        return None
