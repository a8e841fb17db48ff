"""Hand-written loops doing each pipeline's work with no library: the baselines the suite must approach.

Each function takes the loaded data (``data.Loaded``) and returns a generator of batches, as a reader
would write it by hand: same functions from ``workloads``, same batch sizes, same shuffle-buffer
semantics, same TFRecord parsing and CRC checks. No threads: the loops run on the consumer -- except
``p4_two_threads``, shown beside P4's as-ported form as what threads can make of its function here.
"""

from __future__ import annotations

import collections

import numpy as np

from . import workloads as w


def p1(d):
    """range -> map(x + 1) -> batch(1024): a list comprehension per batch, then one array."""
    n, size, fn = d.sizes["p1_n"], w.P1_BATCH, w.add_one
    for start in range(0, n, size):
        yield np.array([fn(i) for i in range(start, min(start + size, n))], dtype=np.int64)


def p1_numpy_scalars(d):
    """The same loop over numpy int64 scalars (what a tf.data-style pipeline hands a map function)."""
    n, size, fn = d.sizes["p1_n"], w.P1_BATCH, w.add_one
    for start in range(0, n, size):
        yield np.array([fn(i) for i in np.arange(start, min(start + size, n), dtype=np.int64)], dtype=np.int64)


def p2(d):
    """slices -> shuffle(10,000) -> batch(256): tf.data's shuffle buffer kept as indices, then one gather.

    Each output draws a uniform slot of the buffer and refills it with the next input index; when the
    input is exhausted the buffer drains the same way (tf.data's semantics).
    """
    x = d.rows
    n = len(x)
    rng = np.random.default_rng(w.SEED)
    buf = list(range(min(w.P2_BUFFER, n)))
    nxt = len(buf)
    idx = np.empty(w.P2_BATCH, np.int64)
    while buf:
        draws = rng.random(w.P2_BATCH).tolist()
        k = 0
        for u in draws:
            if not buf:
                break
            j = int(u * len(buf))
            idx[k] = buf[j]
            if nxt < n:
                buf[j] = nxt
                nxt += 1
            else:
                buf[j] = buf[-1]
                buf.pop()
            k += 1
        yield x[idx[:k]]


def p3(d, check_crc=True):
    """TFRecord files, interleaved 4 at a time (tf.data's cycle order), parsed per record, batched."""
    files = d.tfrecord_files
    records = w.interleave_round_robin((w.read_tfrecords(p, check_crc) for p in files), w.P3_CYCLE)
    arrays, sums = [], []
    for record in records:
        a, s = w.parse_record(record)
        arrays.append(a)
        sums.append(s)
        if len(arrays) == w.P3_BATCH:
            yield np.stack(arrays), np.array(sums)
            arrays, sums = [], []
    if arrays:
        yield np.stack(arrays), np.array(sums)


def p3_raw_read(d):
    """Raw bandwidth: the same files read into one reused 4 MiB buffer (unbuffered ``readinto``), no framing;
    yields byte counts (MB/s figures). The fastest plain read: ``read()`` returning a fresh 4 MiB ``bytes``
    per call measured ~5x slower here (new pages each time), which would flatter the ratio to it."""
    buf = bytearray(1 << 22)
    for path in d.tfrecord_files:
        with open(path, "rb", buffering=0) as f:
            while True:
                n = f.readinto(buf)
                if not n:
                    break
                yield n


def p4(d):
    """images -> seeded random flip + normalise -> batch(128), one image at a time."""
    images = d.images
    n = len(images)
    rng = np.random.default_rng(w.SEED)
    for start in range(0, n, w.P4_BATCH):
        stop = min(start + w.P4_BATCH, n)
        flips = (rng.random(stop - start) < 0.5).tolist()
        yield np.stack([w.augment(images[i], flips[i - start]) for i in range(start, stop)])


def p4_two_threads(d):
    """P4 as ported, by hand on two threads: each batch of ``augment_at`` stacked by one of two pool threads,
    delivered in order, at most four batches in flight. No jaxfeed: what two threads make of this function
    on this machine, the bound for the as-ported form on threads (shown, not judged: docs/performance.md)."""
    from concurrent.futures import ThreadPoolExecutor

    images = d.images
    n = len(images)

    def make(start):
        return np.stack([w.augment_at(i, images[i]) for i in range(start, min(start + w.P4_BATCH, n))])

    with ThreadPoolExecutor(2) as pool:
        pending = collections.deque()
        for start in range(0, n, w.P4_BATCH):
            pending.append(pool.submit(make, start))
            if len(pending) >= 4:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def p5(d):
    """text lines -> tokenize (pure Python) -> batch(256)."""
    lines = d.lines
    for start in range(0, len(lines), w.P5_BATCH):
        yield np.stack([w.tokenize(line) for line in lines[start:start + w.P5_BATCH]])


def p6(d):
    """Parquet files -> rows -> batch(256): each row group's columns to numpy, sliced into batches
    (a batch may span row groups and files, as with ``rows -> batch``)."""
    import pyarrow.parquet as pq

    size = w.P6_BATCH
    pending = None
    for path in d.parquet_files:
        pf = pq.ParquetFile(path)
        for g in range(pf.num_row_groups):
            table = pf.read_row_group(g)
            cols = {name: table.column(name).to_numpy() for name in table.column_names}
            if pending is not None:
                cols = {k: np.concatenate([pending[k], v]) for k, v in cols.items()}
            m = len(cols["id"])
            full = m - m % size
            for s in range(0, full, size):
                yield {k: v[s:s + size] for k, v in cols.items()}
            pending = {k: v[full:] for k, v in cols.items()} if full < m else None
    if pending is not None:
        yield pending


P6_COLUMNS = (("id", np.int64), ("label", np.int32), ("score", np.float32), ("weight", np.float64), ("text", object))


def p6_generator_rows(d):
    """P6 as ported, by hand: a bare Python loop over the same per-file generator (``workloads.parquet_rows``),
    files read one after another, rows collected 256 at a time into one array per column (text as bytes, as
    a dataset of strings holds it). The bound for ``from_generator``'s per-element overhead."""
    size = w.P6_BATCH
    rows = []
    for path in d.parquet_files:
        for row in w.parquet_rows(path):
            rows.append(row)
            if len(rows) == size:
                yield _p6_collate(rows)
                rows = []
    if rows:
        yield _p6_collate(rows)


def _p6_collate(rows):
    out = {}
    for name, dtype in P6_COLUMNS:
        values = [r[name] for r in rows]
        if dtype is object:
            col = np.empty(len(values), object)
            col[:] = [v.encode() for v in values]
            out[name] = col
        else:
            out[name] = np.array(values, dtype)
    return out
