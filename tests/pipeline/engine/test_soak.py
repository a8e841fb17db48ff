"""Soak: a long run of a realistic pipeline keeps a flat resident set (``-m slow``).

``JAXFEED_SOAK_SECONDS`` sets the length (default 600: the 10-minute soak of the memory target). The
pipeline reads TFRecord files over ``repeat`` with a parallel interleave (readers open and close all the
time), decodes on threads, shuffles, augments in worker processes, batches and prefetches; AUTOTUNE's RAM
budget is ``RAM_BUDGET``, so the buffers it may legitimately grow (prefetch doubles its capacity while the
budget allows) stop growing early and small, and a lasting rise is a leak. RSS of this
process and of the worker processes is sampled about every ``duration / SAMPLES`` seconds and printed (run
with ``-s`` to see the series). Flat means: over the second half of the run (the first half lets pools,
allocator arenas and buffers reach their working size) the least-squares growth of RSS, slope times the
half's length, stays under ``GROWTH_BYTES`` + ``GROWTH_FRACTION`` of the level (room for one more
in-flight task result of the process map, whose blocks adapt in size; a leak of ~100 KB/s fails a 10-minute
run).
"""

import os
import time

import numpy as np
import psutil
import pytest

from jaxfeed.formats import TFRecordDataset, TFRecordWriter
from jaxfeed.pipeline import AUTOTUNE, Dataset, Options

SIDE = 32
FILES, RECORDS = 8, 512
SAMPLES = 120
GROWTH_BYTES = 16 << 20
GROWTH_FRACTION = 0.05
RAM_BUDGET = 16 << 20


def decode(record):
    return np.frombuffer(record, dtype=np.uint8).reshape(SIDE, SIDE, 3)


def augment(img, rng):
    if rng.random() < 0.5:
        img = img[:, ::-1]
    return (img.astype(np.float32) - 127.5) / 127.5


def soak_seconds() -> float:
    return float(os.environ.get("JAXFEED_SOAK_SECONDS", 600))


def write_files(folder) -> list:
    rng = np.random.default_rng(0)
    names = []
    for k in range(FILES):
        names.append(str(folder / f"soak-{k}.tfrecord"))
        with TFRecordWriter(names[-1]) as w:
            for _ in range(RECORDS):
                w.write(rng.integers(0, 255, SIDE * SIDE * 3, dtype=np.uint8).tobytes())
    return names


def pipeline(names):
    options = Options()
    options.autotune.ram_budget = RAM_BUDGET
    return (Dataset.from_tensor_slices(names).repeat()
            .interleave(TFRecordDataset, cycle_length=4, num_parallel_calls=AUTOTUNE)
            .map(decode, num_parallel_calls=AUTOTUNE)
            .shuffle(1024, seed=0)
            .map(augment, num_parallel_calls=2, with_rng=True, seed=1, executor="process")
            .batch(64)
            .prefetch(AUTOTUNE)
            .with_options(options))


def rss_parts() -> str:
    """This process's RSS split as /proc reports it (anonymous, file-backed, shared memory), in MiB."""
    try:
        with open("/proc/self/status") as f:
            fields = dict(line.split(":", 1) for line in f if line.startswith("Rss"))
    except OSError:
        return ""
    return " ".join(f"{k[3:].lower()}={int(v.split()[0]) / 1024:.1f}" for k, v in fields.items())


def rss_of_workers(proc) -> int:
    total = 0
    for child in proc.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.Error:  # a worker that just ended
            pass
    return total


def second_half_growth(times, values) -> float:
    """Least-squares slope of ``values`` over the second half of the run, times that half's length."""
    half = len(times) // 2
    t, v = np.asarray(times[half:], float), np.asarray(values[half:], float)
    if len(t) < 2 or t[-1] == t[0]:
        return 0.0
    slope = np.polyfit(t, v, 1)[0]
    return float(slope * (t[-1] - t[0]))


def assert_flat(what, times, values):
    growth = second_half_growth(times, values)
    level = float(np.median(values[len(values) // 2:]))
    allowed = GROWTH_BYTES + GROWTH_FRACTION * level
    print(f"soak {what}: second-half growth {growth / 2**20:+.2f} MiB (allowed {allowed / 2**20:.1f} MiB), "
          f"start {values[0] / 2**20:.1f} MiB, mid {values[len(values) // 2] / 2**20:.1f} MiB, "
          f"end {values[-1] / 2**20:.1f} MiB, max {max(values) / 2**20:.1f} MiB")
    assert growth <= allowed, (f"{what} RSS grows in the second half of the soak: "
                               f"{growth / 2**20:+.1f} MiB > {allowed / 2**20:.1f} MiB")


def test_soak_growth_is_the_second_half_slope_times_its_length():
    times = [0, 1, 2, 3, 4, 5]
    assert second_half_growth(times, [7, 9, 0, 10, 20, 30]) == pytest.approx(20)


def test_soak_growth_ignores_the_warm_up_in_the_first_half():
    assert second_half_growth([0, 1, 2, 3, 4, 5], [1, 2, 3, 4, 4, 4]) == pytest.approx(0, abs=1e-9)


@pytest.mark.slow
@pytest.mark.timeout(soak_seconds() + 300)  # the run itself, plus writing files and closing workers
def test_soak_resident_memory_stays_flat(tmp_path):
    seconds = soak_seconds()
    interval = seconds / SAMPLES
    names = write_files(tmp_path)
    proc = psutil.Process()
    times, own, workers = [], [], []
    batches = 0
    it = iter(pipeline(names))
    try:
        start = time.monotonic()
        next_sample = start
        while True:
            now = time.monotonic()
            if now >= next_sample:
                times.append(now - start)
                own.append(proc.memory_info().rss)
                workers.append(rss_of_workers(proc))
                print(f"soak t={times[-1]:6.1f}s batches={batches:7d} rss={own[-1] / 2**20:7.1f} MiB "
                      f"workers={workers[-1] / 2**20:7.1f} MiB ({rss_parts()})", flush=True)
                next_sample += interval
                if now - start >= seconds:
                    break
            batch = next(it)
            assert batch.shape == (64, SIDE, SIDE, 3)
            batches += 1
    finally:
        it.close()
    print(f"soak: {batches} batches in {times[-1]:.0f} s ({batches * 64 / times[-1]:.0f} images/s)")
    print("soak rss series (MiB):", [round(v / 2**20, 1) for v in own])
    print("soak workers series (MiB):", [round(v / 2**20, 1) for v in workers])
    assert len(times) >= 4
    assert_flat("this process", times, own)
    assert_flat("worker processes", times, workers)
