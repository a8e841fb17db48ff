"""bench/formats.py runs end to end on tiny data and reports every figure (no thresholds: figures only)."""

from jaxfeed.bench import formats


def test_bench_run_reports_tfrecord_and_parquet_figures(tmp_path):
    figures = formats.run(str(tmp_path), total_mb=1, parquet_rows=4000, repeats=1)
    tf, pq = figures["tfrecord"], figures["parquet"]
    assert tf["records"] == 1024 and tf["next_many_MBps"] > 0 and tf["raw_read_4MiB_blocks_GBps"] > 0
    assert pq["rows"] == 4000 and pq["read_table_rows_per_s"] > 0 and pq["dataset_batch_4096_rows_per_s"] > 0
