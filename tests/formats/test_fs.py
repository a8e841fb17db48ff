"""Every path is an fsspec URL: local, file://, memory://, and http:// (a server on 127.0.0.1)."""

import functools
import http.server
import threading

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jaxfeed.formats import ParquetDataset, TextLineDataset, TFRecordDataset, TFRecordWriter, glob
from jaxfeed.formats import tfrecord
from jaxfeed.pipeline import errors

RECORDS = [b"a", b"bb" * 100, b""]


@pytest.fixture()
def http_root(tmp_path):
    """A static file server on 127.0.0.1 serving ``tmp_path``; yields its base URL."""
    handler = functools.partial(_QuietHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield tmp_path, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_tfrecord_over_http(http_root, data_dir):
    root, url = http_root
    (root / "e.tfrecord.gz").write_bytes((data_dir / "examples-0.tfrecord.gz").read_bytes())
    (root / "r.tfrecord").write_bytes(tfrecord.frame_many(RECORDS))
    assert list(TFRecordDataset(f"{url}/r.tfrecord")) == RECORDS
    assert list(TFRecordDataset(f"{url}/e.tfrecord.gz", "GZIP")) == \
        list(TFRecordDataset(str(data_dir / "examples-0.tfrecord")))


def test_missing_http_file_is_not_found(http_root):
    _, url = http_root
    with pytest.raises(errors.NotFoundError, match="nothing.tfrecord"):
        list(TFRecordDataset(f"{url}/nothing.tfrecord"))


def test_parquet_over_http(http_root):
    root, url = http_root
    pq.write_table(pa.table({"v": np.arange(10)}), str(root / "t.parquet"), row_group_size=3)
    assert [r["v"] for r in ParquetDataset(f"{url}/t.parquet")] == list(range(10))


def test_memory_filesystem_write_and_read():
    with TFRecordWriter("memory://jaxfeed-test/a.tfrecord") as w:
        w.write_many(RECORDS)
    with fsspec.open("memory://jaxfeed-test/b.txt", "wb") as f:
        f.write(b"x\ny\n")
    assert list(TFRecordDataset("memory://jaxfeed-test/a.tfrecord")) == RECORDS
    assert list(TextLineDataset("memory://jaxfeed-test/b.txt")) == [b"x", b"y"]


def test_file_url_and_plain_path_read_the_same(tmp_path):
    path = tmp_path / "r.tfrecord"
    path.write_bytes(tfrecord.frame_many(RECORDS))
    assert list(TFRecordDataset(f"file://{path}")) == list(TFRecordDataset(str(path))) == RECORDS


def test_glob_sorts_matches_and_keeps_the_protocol(tmp_path):
    for name in ["b.tfrecord", "a.tfrecord", "c.txt"]:
        (tmp_path / name).write_bytes(b"")
    assert glob(str(tmp_path / "*.tfrecord")) == [str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")]
    with fsspec.open("memory://jaxfeed-glob/x1.tfrecord", "wb") as f:
        f.write(tfrecord.frame(b"r"))
    (found,) = glob("memory://jaxfeed-glob/*.tfrecord")
    assert found.startswith("memory://") and found.endswith("/jaxfeed-glob/x1.tfrecord")
    assert list(TFRecordDataset(found)) == [b"r"]


def test_glob_without_match_is_invalid_argument(tmp_path):
    with pytest.raises(errors.InvalidArgumentError, match="No files matched pattern"):
        glob(str(tmp_path / "*.nothing"))
