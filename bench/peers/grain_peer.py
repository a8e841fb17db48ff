"""Grain versions of the suite (``python -m jaxfeed.bench.peers.grain_peer P1 <datadir>``).

``MapDataset`` pipelines iterated through ``to_iter_dataset()`` (threads by default);
``mp_prefetch`` with 2 worker processes where Python work dominates. P2 uses Grain's global
``shuffle`` (index permutation: stronger than a 10,000-row buffer, same work per row). Grain's TFRecord
reader does not check CRCs.
"""

from __future__ import annotations

import sys

import numpy as np

from .. import workloads as w
from . import _common

NAME = "grain"
UNSUPPORTED = {"P7": "not compared"}
# Variants calling the suite's own Python function per element (workloads.py), as jaxfeed's "as ported"
# forms do (report.py's best_python_peer); P6's ParquetIterDataset runs none.
SAME_FUNCTION = {"python_function": True}


def version():
    import importlib.metadata

    import grain  # noqa: F401

    return importlib.metadata.version("grain")


def _grain():
    import grain

    return grain


def _iterate(ds, threads=None):
    g = _grain()
    if threads is None:
        return lambda: iter(ds.to_iter_dataset())
    return lambda: iter(ds.to_iter_dataset(g.ReadOptions(num_threads=threads)))


def p1(sizes, paths):
    g = _grain()
    ds = g.MapDataset.range(sizes["p1_n"]).map(w.add_one).batch(w.P1_BATCH)
    return {"MapDataset map -> batch": (_iterate(ds), SAME_FUNCTION)}


def p2(sizes, paths):
    g = _grain()
    rows = np.load(paths["p2"])
    ds = g.MapDataset.source(rows).shuffle(seed=w.SEED).batch(w.P2_BATCH)
    return {"MapDataset shuffle -> batch": (_iterate(ds), {})}


def p3(sizes, paths):
    g = _grain()
    from grain.experimental import InterleaveIterDataset, TFRecordIterDataset

    def make():
        files = [TFRecordIterDataset(p) for p in paths["p3"]]
        return iter(InterleaveIterDataset(files, cycle_length=w.P3_CYCLE).map(w.parse_record).batch(w.P3_BATCH))

    del g
    return {"Interleave(TFRecord) map -> batch": (make, {"crc": False, **SAME_FUNCTION})}


def p4(sizes, paths):
    g = _grain()
    images = np.load(paths["p4"])
    ds = g.MapDataset.source(images).random_map(w.augment_with_rng, seed=w.SEED).batch(w.P4_BATCH)

    def mp():
        it_ds = ds.to_iter_dataset().mp_prefetch(g.MultiprocessingOptions(num_workers=2))
        return iter(it_ds)

    return {"random_map -> batch (threads)": (_iterate(ds, threads=2), SAME_FUNCTION),
            "random_map -> batch, mp_prefetch workers=2": (mp, SAME_FUNCTION)}


def p5(sizes, paths):
    g = _grain()
    lines = w.read_lines(paths["p5"])
    ds = g.MapDataset.source(lines).map(w.tokenize).batch(w.P5_BATCH)

    def mp():
        return iter(ds.to_iter_dataset().mp_prefetch(g.MultiprocessingOptions(num_workers=2)))

    info = {"python_function": True}
    return {"map -> batch (threads)": (_iterate(ds, threads=2), info),
            "map -> batch, mp_prefetch workers=2": (mp, info)}


def p6(sizes, paths):
    g = _grain()
    from grain.experimental import ParquetIterDataset

    return {"ParquetIterDataset -> batch": (lambda: iter(ParquetIterDataset(paths["p6"]).batch(w.P6_BATCH)), {})}


PIPELINES = {"P1": p1, "P2": p2, "P3": p3, "P4": p4, "P5": p5, "P6": p6}

if __name__ == "__main__":
    sys.exit(_common.main(sys.modules[__name__]))
