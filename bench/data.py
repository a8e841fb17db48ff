"""Synthetic data for the suite, written once per scale into a cache folder and reused.

The folder (``$JAXFEED_BENCH_DATA`` or ``<tmp>/jaxfeed-bench-data``) holds one sub-folder per scale;
``meta.json`` is written last, so a folder without it is incomplete and is rebuilt.

- P2: ``p2_rows.npy``, rows x 32 float32.
- P3: ``tfrecord/part-XXXXX.tfrecord``, records of random bytes (TFRecord framing with masked CRC32C;
  written by ``jaxfeed.formats.TFRecordWriter`` when it exists).
- P4: ``p4_images.npy``, N x 64 x 64 x 3 uint8.
- P5: ``p5_lines.txt``, one line of 8-40 mixed-case words per line.
- P6: ``parquet/part-XXXXX.parquet``: id int64, label int32, score float32, weight float64, text string.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import numpy as np

from . import workloads

VERSION = 1


def default_root() -> str:
    return os.environ.get("JAXFEED_BENCH_DATA") or os.path.join(tempfile.gettempdir(), "jaxfeed-bench-data")


def ensure(scale="full", root=None, log=print) -> str:
    """The data folder for ``scale``, generating it first if needed."""
    sizes = workloads.SIZES[scale]
    path = os.path.join(root or default_root(), f"{scale}-v{VERSION}")
    meta_path = os.path.join(path, "meta.json")
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            if json.load(f).get("sizes") == sizes:
                return path
    if os.path.exists(path):
        shutil.rmtree(path)
    os.makedirs(path)
    log(f"generating {scale} synthetic data in {path} ...")
    rng = np.random.default_rng(workloads.SEED)
    np.save(os.path.join(path, "p2_rows.npy"),
            rng.random((sizes["p2_rows"], sizes["p2_cols"]), dtype=np.float32))
    writer = write_tfrecords(os.path.join(path, "tfrecord"), sizes["p3_files"], sizes["p3_records"],
                             sizes["p3_bytes"], rng)
    side = sizes["p4_side"]
    np.save(os.path.join(path, "p4_images.npy"),
            rng.integers(0, 256, (sizes["p4_images"], side, side, 3), dtype=np.uint8))
    write_lines(os.path.join(path, "p5_lines.txt"), sizes["p5_lines"], rng)
    write_parquet(os.path.join(path, "parquet"), sizes["p6_files"], sizes["p6_rows"], rng)
    with open(meta_path, "w") as f:
        json.dump({"sizes": sizes, "scale": scale, "tfrecord_writer": writer}, f, indent=1)
    return path


def write_tfrecords(folder, files, records, nbytes, rng) -> str:
    """Write ``files`` TFRecord files; return which writer was used."""
    os.makedirs(folder)
    try:
        from jaxfeed.formats import TFRecordWriter
    except ImportError:
        TFRecordWriter = None
    for i in range(files):
        payloads = rng.integers(0, 256, (records, nbytes), dtype=np.uint8)
        name = os.path.join(folder, f"part-{i:05d}.tfrecord")
        if TFRecordWriter is not None:
            with TFRecordWriter(name) as w:
                for p in payloads:
                    w.write(p.tobytes())
        else:
            with open(name, "wb") as f:
                f.write(b"".join(workloads.frame_record(p.tobytes()) for p in payloads))
    return "jaxfeed.formats.TFRecordWriter" if TFRecordWriter is not None else "bench framing (google-crc32c)"


def write_lines(path, n, rng):
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", np.uint8)
    lengths = rng.integers(2, 10, 5000)
    vocab = [letters[rng.integers(0, len(letters), k)].tobytes().decode() for k in lengths]
    counts = rng.integers(8, 41, n)
    words = rng.integers(0, len(vocab), int(counts.sum()))
    lines, pos = [], 0
    for c in counts:
        lines.append(" ".join(vocab[w] for w in words[pos:pos + c]))
        pos += c
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def write_parquet(folder, files, rows, rng):
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(folder)
    words = np.array([f"item-{i}" for i in range(1000)], dtype=object)
    for i in range(files):
        base = i * rows
        table = pa.table({
            "id": pa.array(np.arange(base, base + rows, dtype=np.int64)),
            "label": pa.array(rng.integers(0, 10, rows, dtype=np.int32)),
            "score": pa.array(rng.random(rows, dtype=np.float32)),
            "weight": pa.array(rng.random(rows)),
            "text": pa.array(words[rng.integers(0, len(words), rows)], type=pa.string()),
        })
        pq.write_table(table, os.path.join(folder, f"part-{i:05d}.parquet"), row_group_size=8192)


class Loaded:
    """The data sets of one folder, loaded into memory on first use (shared by suite and baselines)."""

    def __init__(self, path):
        self.path = path
        with open(os.path.join(path, "meta.json")) as f:
            self.meta = json.load(f)
        self.sizes = self.meta["sizes"]
        self.files = workloads.data_paths(path)
        self._cache = {}

    def _get(self, key, load):
        if key not in self._cache:
            self._cache[key] = load()
        return self._cache[key]

    @property
    def rows(self) -> np.ndarray:
        return self._get("p2", lambda: np.load(self.files["p2"]))

    @property
    def images(self) -> np.ndarray:
        return self._get("p4", lambda: np.load(self.files["p4"]))

    @property
    def lines(self) -> list:
        return self._get("p5", lambda: workloads.read_lines(self.files["p5"]))

    @property
    def tfrecord_files(self) -> list:
        return self.files["p3"]

    @property
    def parquet_files(self) -> list:
        return self.files["p6"]
