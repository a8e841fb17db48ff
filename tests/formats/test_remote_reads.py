"""Remote reads (http:// on a loopback server that misbehaves on purpose, see fault_server.py) give every
record exactly once, or an error from jaxfeed.pipeline.errors naming the URL and the byte offset -- never a
file that ends early, records dropped or repeated, a hang, or a raw aiohttp/fsspec error.

Retries sleep through ``storage_options["retry_sleep"]``: the tests record the sleeps instead of waiting.
The ``timeout`` marks are hang guards only (the stalls below are cut by a 1 s client timeout)."""

import functools
import gzip

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxfeed.formats import CsvDataset, ParquetDataset, TextLineDataset, TFRecordDataset, tfrecord
from jaxfeed.pipeline import errors

from fault_server import FaultServer

RECORDS = [i.to_bytes(8, "little") * (60 + i % 13) for i in range(12_000)]
DATA = tfrecord.frame_many(RECORDS)
LATE = 500_000  # a byte offset past the first reads


@functools.cache
def gzipped():
    return gzip.compress(DATA, compresslevel=1)


@pytest.fixture()
def server():
    s = FaultServer()
    s.files["r.tfrecord"] = DATA
    s.files["r.tfrecord.gz"] = gzipped()
    with s.serve():
        yield s


@pytest.fixture()
def sleeps():
    return []


def options(sleeps, **more):
    # timeout: generous (a busy machine must not make an answer late); the stall tests set a short one
    return {"timeout": 30.0, "retries": 2, "retry_backoff": 0.1, "retry_sleep": sleeps.append, **more}


def read_until_error(dataset):
    got = []
    with pytest.raises(errors.OpError) as info:
        for record in dataset:
            got.append(record)
    return got, info.value


# ------------------------------------------------------------------ defect 8: short or duplicated reads
def test_an_empty_206_is_data_loss_naming_the_url_and_offset(server, sleeps):
    server.faults = lambda r: ("empty206",) if r.method == "GET" and (r.start or 0) >= LATE else None
    url = server.url("r.tfrecord")
    got, error = read_until_error(TFRecordDataset(url, storage_options=options(sleeps)))
    assert isinstance(error, errors.DataLossError)
    assert error.filename == url and url in str(error)
    assert error.offset >= LATE and str(error.offset) in str(error)
    assert got == RECORDS[:len(got)] and len(got) < len(RECORDS)
    assert len(sleeps) == 2  # retried, then given up


def test_short_self_consistent_206_bodies_are_placed_at_their_offsets(server, sleeps):
    server.faults = lambda r: ("short206", 50_000) if r.method == "GET" else None
    assert list(TFRecordDataset(server.url("r.tfrecord"), storage_options=options(sleeps))) == RECORDS
    assert list(TFRecordDataset(server.url("r.tfrecord.gz"), "GZIP", storage_options=options(sleeps))) == RECORDS
    assert sleeps == []  # a short answer is not an error: the rest is asked for


def test_a_transient_empty_206_is_retried(server, sleeps):
    server.faults = lambda r: ("empty206",) if r.method == "GET" and r.count == 2 else None
    assert list(TFRecordDataset(server.url("r.tfrecord"), storage_options=options(sleeps))) == RECORDS
    assert sleeps == [0.1]


def test_a_server_that_ignores_range_gives_the_whole_file_once(server, sleeps):
    server.faults = lambda r: ("ignore_range",) if r.method == "GET" else None
    assert list(TFRecordDataset(server.url("r.tfrecord"), storage_options=options(sleeps))) == RECORDS
    assert len(server.gets("r.tfrecord")) == 1


def test_a_file_that_changes_size_while_read_is_data_loss(server, sleeps):
    def grow(r):
        if r.method == "GET" and r.count == 1:
            server.files["r.tfrecord"] = DATA + DATA[:100]
    server.faults = grow
    got, error = read_until_error(TFRecordDataset(server.url("r.tfrecord"), storage_options=options(sleeps)))
    assert isinstance(error, errors.DataLossError) and "size" in str(error)
    assert got == RECORDS[:len(got)]


# ------------------------------------------------------------------ defect 12: stalled or failing servers
# (Assertions that hold even if a busy machine made the HEAD before the stalled GETs late too.)
@pytest.mark.timeout(60)
def test_a_stalled_server_is_deadline_exceeded_after_bounded_retries(server, sleeps):
    server.faults = lambda r: ("stall",) if r.method == "GET" else None
    url = server.url("r.tfrecord")
    got, error = read_until_error(TFRecordDataset(url, storage_options=options(sleeps, timeout=1.0, retries=1)))
    assert isinstance(error, errors.DeadlineExceededError) and isinstance(error, TimeoutError)
    assert got == [] and error.filename == url and error.offset == 0
    assert url in str(error) and "1.0 s" in str(error) and "2 attempts" in str(error)
    assert 1 <= len(server.gets("r.tfrecord")) <= 2 and sleeps[-1] == 0.1


@pytest.mark.timeout(60)
def test_a_server_that_stalls_at_open_is_deadline_exceeded(server, sleeps):
    server.faults = lambda r: ("stall",) if r.method == "HEAD" else None
    url = server.url("r.tfrecord")
    _, error = read_until_error(TFRecordDataset(url, storage_options=options(sleeps, timeout=1.0, retries=1)))
    assert isinstance(error, errors.DeadlineExceededError) and error.offset == 0 and url in str(error)
    assert server.gets("r.tfrecord") == [] and sleeps == [0.1]


@pytest.mark.parametrize("status", [500, 502, 503, 504, 429])
def test_transient_statuses_are_retried_and_recover(server, sleeps, status):
    server.faults = lambda r: ("status", status) if r.count < 2 else None
    assert list(TFRecordDataset(server.url("r.tfrecord"), storage_options=options(sleeps))) == RECORDS
    assert sleeps == [0.1, 0.2, 0.1, 0.2]  # HEAD (the size) twice, then the first GET twice


def test_a_failing_server_is_unavailable_naming_url_offset_and_status(server, sleeps):
    server.faults = lambda r: ("status", 503) if r.method == "GET" and (r.start or 0) >= LATE else None
    url = server.url("r.tfrecord")
    got, error = read_until_error(TFRecordDataset(url, storage_options=options(sleeps)))
    assert type(error) is errors.UnavailableError and isinstance(error, ConnectionError)
    assert error.filename == url and error.offset >= LATE and "503" in str(error) and url in str(error)
    assert got == RECORDS[:len(got)]
    assert sleeps == [0.1, 0.2]


def test_a_500_at_open_is_unavailable_not_not_found(server, sleeps):
    server.faults = lambda r: ("status", 500)
    _, error = read_until_error(TFRecordDataset(server.url("r.tfrecord"), storage_options=options(sleeps)))
    assert type(error) is errors.UnavailableError and "500" in str(error)


def test_only_a_real_404_is_not_found(server, sleeps):
    _, error = read_until_error(TFRecordDataset(server.url("missing.tfrecord"), storage_options=options(sleeps)))
    assert type(error) is errors.NotFoundError and sleeps == []


def test_a_403_is_permission_denied(server, sleeps):
    server.faults = lambda r: ("status", 403)
    _, error = read_until_error(TFRecordDataset(server.url("r.tfrecord"), storage_options=options(sleeps)))
    assert type(error) is errors.PermissionDeniedError and sleeps == []


def test_reset_connections_are_retried_and_recover(server, sleeps):
    # (aiohttp itself tries a request again once after a reset; the rest is ours)
    server.faults = lambda r: ("reset",) if r.method == "GET" and r.count < 4 else None
    assert list(TFRecordDataset(server.url("r.tfrecord"), storage_options=options(sleeps))) == RECORDS
    assert len(sleeps) >= 1


def test_connections_reset_for_good_are_unavailable(server, sleeps):
    server.faults = lambda r: ("reset",) if r.method == "GET" else None
    _, error = read_until_error(TFRecordDataset(server.url("r.tfrecord"), storage_options=options(sleeps)))
    assert type(error) is errors.UnavailableError and error.offset == 0
    assert "3 attempts" in str(error) and sleeps == [0.1, 0.2]


def test_headers_reach_the_server(server, sleeps):
    opts = options(sleeps, headers={"X-Jaxfeed-Token": "t0k"})
    assert list(TFRecordDataset(server.url("r.tfrecord"), storage_options=opts)) == RECORDS
    assert server.headers_seen and all(h.get("X-Jaxfeed-Token") == "t0k" for h in server.headers_seen)


def test_storage_options_are_checked_at_construction():
    with pytest.raises(TypeError):
        TFRecordDataset("http://127.0.0.1:1/x", storage_options=["timeout"])
    with pytest.raises(ValueError):
        TFRecordDataset("http://127.0.0.1:1/x", storage_options={"retries": -1})
    with pytest.raises(ValueError):
        TFRecordDataset("http://127.0.0.1:1/x", storage_options={"timeout": 0})


# ------------------------------------------------------------------ the other readers
def test_text_lines_recover_from_503_and_report_data_loss(server, sleeps):
    lines = [b"line %d" % i for i in range(300_000)]  # 3.6 MB: several 1 MiB reads
    server.files["t.txt"] = b"\n".join(lines) + b"\n"
    server.faults = lambda r: ("status", 503) if r.method == "GET" and r.count == 1 else None
    assert list(TextLineDataset(server.url("t.txt"), storage_options=options(sleeps))) == lines
    assert sleeps == [0.1]
    server.faults = lambda r: ("empty206",) if r.method == "GET" and (r.start or 0) >= 1_500_000 else None
    got, error = read_until_error(TextLineDataset(server.url("t.txt"), storage_options=options(sleeps)))
    assert isinstance(error, errors.DataLossError) and got == lines[:len(got)]


def test_csv_over_short_206_bodies(server, sleeps):
    server.files["c.csv"] = b"".join(b"%d,%d\n" % (i, 2 * i) for i in range(20_000))
    server.faults = lambda r: ("short206", 7_000) if r.method == "GET" else None
    rows = list(CsvDataset(server.url("c.csv"), [np.int64, np.int64], storage_options=options(sleeps)))
    assert [(int(a), int(b)) for a, b in rows] == [(i, 2 * i) for i in range(20_000)]


def test_parquet_recovers_from_503(server, sleeps, tmp_path):
    pq.write_table(pa.table({"v": np.arange(1000)}), str(tmp_path / "t.parquet"), row_group_size=100)
    server.files["t.parquet"] = (tmp_path / "t.parquet").read_bytes()
    server.faults = lambda r: ("status", 503) if r.method == "GET" and r.count % 3 == 1 else None
    got = [int(r["v"]) for r in ParquetDataset(server.url("t.parquet"), storage_options=options(sleeps))]
    assert got == list(range(1000)) and sleeps
    for fault in [("short206", 700), ("ignore_range",)]:  # pyarrow seeks and reads in small pieces
        server.faults = lambda r, fault=fault: fault if r.method == "GET" else None
        got = [int(r["v"]) for r in ParquetDataset(server.url("t.parquet"), storage_options=options(sleeps))]
        assert got == list(range(1000))


def test_without_storage_options_reads_are_verified_too(server):
    """The defaults (no storage_options) take the same checked path: nothing here needs a retry."""
    server.faults = lambda r: ("short206", 300_000) if r.method == "GET" and r.count % 2 else None
    assert list(TFRecordDataset(server.url("r.tfrecord"))) == RECORDS
    server.faults = lambda r: ("ignore_range",) if r.method == "GET" else None
    assert list(TFRecordDataset(server.url("r.tfrecord"), num_parallel_reads=2)) == RECORDS


# ------------------------------------------------------------------ any mix of the faults above
SMALL = [i.to_bytes(4, "little") * (1 + i % 50) for i in range(2_000)]  # ~136 KB: a few 64 KiB reads
FAULTS = st.one_of(st.none(), st.tuples(st.just("short206"), st.integers(1, 70_000)), st.just(("empty206",)),
                   st.just(("status", 503)), st.just(("reset",)), st.just(("ignore_range",)))


def _check_fault_plan(server, plan, compression):
    server.files["small"] = tfrecord.frame_many(SMALL)
    server.files["small.gz"] = gzip.compress(server.files["small"], compresslevel=1)
    gets = iter(plan)
    server.faults = lambda r: next(gets, None) if r.method == "GET" else None
    name = "small.gz" if compression else "small"
    dataset = TFRecordDataset(server.url(name), compression, buffer_size=1 << 16,
                              storage_options={"timeout": 30.0, "retries": 2, "retry_sleep": lambda s: None})
    got = []
    try:
        for record in dataset:
            got.append(record)
    except (errors.DataLossError, errors.UnavailableError) as e:
        assert e.filename == server.url(name) and e.offset is not None
        assert got == SMALL[:len(got)]
    else:
        assert got == SMALL


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(plan=st.lists(FAULTS, max_size=12), compression=st.sampled_from(["", "GZIP"]))
def test_any_mix_of_faults_gives_the_records_or_an_error_smoke(server, plan, compression):
    _check_fault_plan(server, plan, compression)


@pytest.mark.slow
@settings(max_examples=400, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(plan=st.lists(FAULTS, max_size=30), compression=st.sampled_from(["", "GZIP"]))
def test_any_mix_of_faults_gives_the_records_or_an_error_long(server, plan, compression):
    _check_fault_plan(server, plan, compression)
