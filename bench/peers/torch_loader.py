"""PyTorch ``DataLoader`` versions of the suite (``python -m jaxfeed.bench.peers.torch_loader P1 <datadir>``).

Idiomatic DataLoader use: a map-style ``Dataset`` whose ``__getitem__`` does the per-element work and
the default collate builds batches; ``IterableDataset`` for the file formats. ``num_workers=0`` runs on
the consumer; ``num_workers=2`` (one per core here) uses worker processes. P2 uses ``shuffle=True`` (a
full permutation: a stronger shuffle than a 10,000-row buffer, for the same work per row).
"""

from __future__ import annotations

import sys

import numpy as np

from .. import workloads as w
from . import _common

NAME = "torch"
UNSUPPORTED = {"P7": "not compared"}
# These variants call the suite's own Python functions per element (workloads.py), as jaxfeed's "as ported"
# forms do: the peers the as-ported targets compare with (report.py's best_python_peer).
SAME_FUNCTION = {"python_function": True}


def version():
    import torch

    return torch.__version__


def _loader(dataset, batch_size, workers=0, **kw):
    from torch.utils.data import DataLoader

    return DataLoader(dataset, batch_size=batch_size, num_workers=workers, **kw)


def _map_style(length, getitem):
    from torch.utils.data import Dataset

    class MapStyle(Dataset):
        def __len__(self):
            return length

        def __getitem__(self, i):
            return getitem(i)

    return MapStyle()


def p1(sizes, paths):
    ds = _map_style(sizes["p1_n"], w.add_one)
    return {"DataLoader workers=0": (lambda: _loader(ds, w.P1_BATCH), SAME_FUNCTION)}


def p2(sizes, paths):
    import torch

    rows = np.load(paths["p2"])
    ds = _map_style(len(rows), rows.__getitem__)
    return {"DataLoader shuffle=True workers=0": (
        lambda: _loader(ds, w.P2_BATCH, shuffle=True, generator=torch.Generator().manual_seed(w.SEED)), {})}


def _records(files):
    from torch.utils.data import IterableDataset, get_worker_info

    class Records(IterableDataset):
        def __iter__(self):
            info = get_worker_info()
            mine = files if info is None else files[info.id::info.num_workers]
            records = w.interleave_round_robin((w.read_tfrecords(p) for p in mine), w.P3_CYCLE)
            return (w.parse_record(r) for r in records)

    return Records()


def p3(sizes, paths):
    ds = _records(paths["p3"])
    info = {"crc": w.HAVE_CRC32C, **SAME_FUNCTION}
    return {"DataLoader workers=0": (lambda: _loader(ds, w.P3_BATCH), info),
            "DataLoader workers=2": (lambda: _loader(ds, w.P3_BATCH, workers=2), info)}


def p4(sizes, paths):
    images = np.load(paths["p4"])
    ds = _map_style(len(images), lambda i: w.augment(images[i], w.flip_for(i)))
    return {"DataLoader workers=0": (lambda: _loader(ds, w.P4_BATCH), SAME_FUNCTION),
            "DataLoader workers=2": (lambda: _loader(ds, w.P4_BATCH, workers=2), SAME_FUNCTION)}


def p5(sizes, paths):
    lines = w.read_lines(paths["p5"])
    ds = _map_style(len(lines), lambda i: w.tokenize(lines[i]))
    info = {"python_function": True}
    return {"DataLoader workers=0": (lambda: _loader(ds, w.P5_BATCH), info),
            "DataLoader workers=2": (lambda: _loader(ds, w.P5_BATCH, workers=2), info)}


def p6(sizes, paths):
    from torch.utils.data import IterableDataset

    files = paths["p6"]

    class Rows(IterableDataset):
        def __iter__(self):
            import pyarrow.parquet as pq

            for path in files:
                pf = pq.ParquetFile(path)
                for g in range(pf.num_row_groups):
                    yield from pf.read_row_group(g).to_pylist()

    ds = Rows()
    return {"DataLoader workers=0": (lambda: _loader(ds, w.P6_BATCH), SAME_FUNCTION)}


PIPELINES = {"P1": p1, "P2": p2, "P3": p3, "P4": p4, "P5": p5, "P6": p6}

if __name__ == "__main__":
    sys.exit(_common.main(sys.modules[__name__]))
