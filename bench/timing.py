"""Timing one pipeline: a warm-up, then N repetitions; elements/s as min / median / max.

Standard library only (the peer interpreters import it too). A repetition runs one epoch, or stops
``max_seconds`` after its first batch; the rate of a cut-short run is projected to a whole epoch (time to
the first batch, then the rest of the epoch at the rate seen after it), so start-up costs (worker
processes, file opens) weigh in once per epoch whatever the cap. The time to the first batch is
measured from the call that builds the iterator to the arrival of its first batch.
"""

from __future__ import annotations

import os
import statistics
import time

from .workloads import rows_of


def measure(make_iterable, repeats=5, warmup=1, max_seconds=None, count=rows_of, epoch=None):
    """Run ``make_iterable()`` ``warmup + repeats`` times; return figures of the timed runs."""
    runs = [once(make_iterable, max_seconds, count) for _ in range(warmup + repeats)]
    return summarize(runs[warmup:], epoch)


def once(make_iterable, max_seconds=None, count=rows_of) -> dict:
    """One repetition: an epoch, or its prefix until ``max_seconds`` after the first batch."""
    t0 = time.perf_counter()
    it = iter(make_iterable())
    first = None
    n = n_first = 0
    complete = False
    try:
        for batch in it:
            n += count(batch)
            if first is None:
                first = time.perf_counter() - t0
                n_first = n
            elif max_seconds is not None and time.perf_counter() - t0 - first > max_seconds:
                break
        else:
            complete = True
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
    return {"elements": n, "seconds": time.perf_counter() - t0, "first_batch_s": first,
            "first_elements": n_first, "complete": complete}


def epoch_rate(run, epoch=None) -> float:
    """Elements per second over one epoch: measured when the run finished it, else projected from the
    time to the first batch plus the rest of the epoch at the rate seen after the first batch."""
    n, dt = run["elements"], run["seconds"]
    if run.get("complete", True) or not epoch or run["first_batch_s"] is None or n <= run["first_elements"]:
        return n / dt if dt > 0 else 0.0
    steady = (n - run["first_elements"]) / (dt - run["first_batch_s"])
    projected = run["first_batch_s"] + (epoch - run["first_elements"]) / steady
    return epoch / projected


def summarize(runs, epoch=None):
    rates = [epoch_rate(r, epoch) for r in runs if r["seconds"] > 0]
    firsts = [r["first_batch_s"] for r in runs if r["first_batch_s"] is not None]
    return {
        "median": statistics.median(rates) if rates else 0.0,
        "min": min(rates) if rates else 0.0,
        "max": max(rates) if rates else 0.0,
        "rates": [round(r, 3) for r in rates] if len(rates) == len(runs) else None,  # one per repetition
        "first_batch_s": statistics.median(firsts) if firsts else None,
        "elements": [r["elements"] for r in runs],
        "seconds": [round(r["seconds"], 4) for r in runs],
        "complete_epochs": sum(bool(r.get("complete")) for r in runs),
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
