"""Format reader throughput: TFRecord records/s and MB/s against raw ``read()`` of the same files, Parquet
rows/s against ``pyarrow.parquet.read_table`` of the same files.

``run(tmpdir) -> dict`` writes its data under ``tmpdir`` and returns the figures (best of ``repeats``
runs, files warm in the page cache: this measures the reader's CPU cost, not the disk). Times are CPU
seconds of this process (``time.process_time``; kernel time of ``read()`` included), so a busy shared
machine does not distort the ratios; ``clock`` in the result says so. One core: nothing
here starts threads. ``python -m jaxfeed.bench.formats [--mb 128] [--tmpdir DIR]`` prints them as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

RECORD_BYTES = 1024
READ_BLOCK = 4 << 20


CLOCK = time.process_time  # CPU seconds of this (single-threaded) process: robust to other load on the box


WALL: dict = {}  # the best wall-clock seconds of the last _best call per label, for the report


def _best(fn, repeats: int, label: str | None = None) -> float:
    best, best_wall = float("inf"), float("inf")
    for _ in range(repeats):
        start, start_wall = CLOCK(), time.perf_counter()
        fn()
        best = min(best, CLOCK() - start)
        best_wall = min(best_wall, time.perf_counter() - start_wall)
    if label:
        WALL[label] = best_wall
    return best


def write_tfrecords(folder: str, total_mb: int, files: int = 4) -> tuple[list, int, int]:
    from jaxfeed.formats import TFRecordWriter

    os.makedirs(folder, exist_ok=True)
    per_file = total_mb * (1 << 20) // RECORD_BYTES // files
    rng = np.random.default_rng(0)
    names = []
    for i in range(files):
        name = os.path.join(folder, f"bench-{i}.tfrecord")
        blob = rng.integers(0, 256, per_file * RECORD_BYTES, dtype=np.uint8).tobytes()
        with TFRecordWriter(name) as w:
            w.write_many([blob[k * RECORD_BYTES:(k + 1) * RECORD_BYTES] for k in range(per_file)])
        names.append(name)
    return names, per_file * files, sum(os.path.getsize(n) for n in names)


def write_varying_tfrecords(folder: str, total_mb: int) -> tuple[list, int, int]:
    """One file of records of 512..1536 bytes (1 KiB on average): no runs of equal sizes to exploit."""
    from jaxfeed.formats import TFRecordWriter

    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(2)
    sizes = rng.integers(512, 1537, total_mb * (1 << 20) // RECORD_BYTES)
    bounds = np.concatenate([[0], np.cumsum(sizes)]).tolist()
    blob = rng.integers(0, 256, bounds[-1], dtype=np.uint8).tobytes()
    name = os.path.join(folder, "bench-varying.tfrecord")
    with TFRecordWriter(name) as w:
        w.write_many([blob[a:b] for a, b in zip(bounds[:-1], bounds[1:])])
    return [name], len(sizes), bounds[-1]


def raw_read(names, block: int | None = READ_BLOCK) -> None:
    for name in names:
        with open(name, "rb", buffering=0) as f:
            if block is None:
                f.read()
            else:
                while f.read(block):
                    pass


def tfrecord_next_many(names, n_records: int, verify: bool = True) -> None:
    from jaxfeed.formats import TFRecordDataset

    it = iter(TFRecordDataset(names, verify_crc=verify))
    got = 0
    while True:
        block = it.next_many(8192)
        if not block:
            break
        got += len(block)
    it.close()
    assert got == n_records, (got, n_records)


def tfrecord_for_loop(names, n_records: int) -> None:
    from jaxfeed.formats import TFRecordDataset

    got = 0
    for _ in TFRecordDataset(names):
        got += 1
    assert got == n_records


def tfrecord_batched(names, n_records: int) -> None:
    from jaxfeed.formats import TFRecordDataset

    got = 0
    for batch in TFRecordDataset(names).batch(1024):
        got += len(batch)
    assert got == n_records


def write_parquet(folder: str, rows: int, files: int = 4) -> list:
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(1)
    names = []
    per_file = rows // files
    for i in range(files):
        ids = np.arange(i * per_file, (i + 1) * per_file, dtype=np.int64)
        table = pa.table({"id": ids, "label": rng.integers(0, 10, per_file).astype(np.int32),
                          "score": rng.random(per_file, dtype=np.float32),
                          "text": pa.array([f"row-{k}" for k in ids.tolist()])})
        name = os.path.join(folder, f"bench-{i}.parquet")
        pq.write_table(table, name, row_group_size=65536)
        names.append(name)
    return names


def parquet_read_table(names) -> int:
    import pyarrow.parquet as pq

    return sum(pq.read_table(n).num_rows for n in names)


def parquet_batches(names, batch: int = 4096) -> int:
    from jaxfeed.formats import ParquetDataset

    got = 0
    for b in ParquetDataset(names).batch(batch):
        got += len(b["id"])
    return got


def parquet_record_batches(names, batch: int = 4096) -> int:
    from jaxfeed.formats import ParquetDataset

    got = 0
    for b in ParquetDataset(names, batch_size=batch):
        got += len(b["id"])
    return got


def run(tmpdir: str, total_mb: int = 128, parquet_rows: int = 2_000_000, repeats: int = 3) -> dict:
    """Measure and return a dict of figures (see module doc)."""
    names, n_records, file_bytes = write_tfrecords(os.path.join(tmpdir, "tfrecord"), total_mb)
    payload_mb = n_records * RECORD_BYTES / 1e6
    raw_block = _best(lambda: raw_read(names), repeats, "raw")
    raw_whole = _best(lambda: raw_read(names, None), repeats)
    ours = _best(lambda: tfrecord_next_many(names, n_records), repeats, "ours")
    ours_nocrc = _best(lambda: tfrecord_next_many(names, n_records, verify=False), repeats)
    loop = _best(lambda: tfrecord_for_loop(names, n_records), repeats)
    batched = _best(lambda: tfrecord_batched(names, n_records), repeats)
    vnames, v_records, v_payload = write_varying_tfrecords(os.path.join(tmpdir, "tfrecord-varying"), total_mb)
    varying = _best(lambda: tfrecord_next_many(vnames, v_records), repeats)
    tf = {
        "clock": "process_time (CPU s)", "record_bytes": RECORD_BYTES, "records": n_records, "file_mb": file_bytes / 1e6,
        "raw_read_4MiB_blocks_GBps": file_bytes / raw_block / 1e9,
        "raw_read_whole_file_GBps": file_bytes / raw_whole / 1e9,
        "next_many_records_per_s": n_records / ours, "next_many_MBps": payload_mb / ours,
        "next_many_no_crc_MBps": payload_mb / ours_nocrc,
        "varying_512_1536B_next_many_MBps": v_payload / 1e6 / varying,
        "varying_512_1536B_records_per_s": v_records / varying,
        "for_loop_records_per_s": n_records / loop, "for_loop_MBps": payload_mb / loop,
        "batch_1024_MBps": payload_mb / batched,
        "vs_raw_4MiB_blocks": (file_bytes / ours) / (file_bytes / raw_block),
        "wall_raw_read_4MiB_blocks_GBps": file_bytes / WALL["raw"] / 1e9,
        "wall_next_many_MBps": payload_mb / WALL["ours"],
        "vs_raw_whole_file": (file_bytes / ours) / (file_bytes / raw_whole),
    }
    pnames = write_parquet(os.path.join(tmpdir, "parquet"), parquet_rows)
    pq_time = _best(lambda: parquet_read_table(pnames), repeats)
    ours_batch = _best(lambda: parquet_batches(pnames), repeats)
    ours_stream = _best(lambda: parquet_record_batches(pnames), repeats)
    pq_fig = {
        "rows": parquet_rows, "columns": "id int64, label int32, score float32, text string",
        "read_table_rows_per_s": parquet_rows / pq_time,
        "dataset_batch_4096_rows_per_s": parquet_rows / ours_batch,
        "dataset_record_batches_4096_rows_per_s": parquet_rows / ours_stream,
        "batch_vs_read_table": pq_time / ours_batch,
    }
    return {"tfrecord": tf, "parquet": pq_fig}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jaxfeed.bench.formats", description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=128, help="TFRecord data size in MiB (default 128)")
    parser.add_argument("--parquet-rows", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tmpdir", default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.tmpdir) as tmp:
        figures = run(tmp, args.mb, args.parquet_rows, args.repeats)
    json.dump(figures, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
