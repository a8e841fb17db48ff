"""The reference suite P1-P7: one small function per pipeline, written with jaxfeed's tf.data API.

Each ``pN(d, npc)`` takes the loaded data (``data.Loaded``) and a ``num_parallel_calls`` setting (used
by the pipelines that have a parallel stage, P3-P5; the AUTOTUNE check passes 1, 2, 4, ...) and returns
a ``Dataset``. A pipeline whose building blocks have not landed yet raises ``Unavailable``.

``pN_vectorized`` is the same pipeline with its map declared ``vectorized=True`` (the function works on a
batch too, so the vectorized_map pass calls it once per batch): the batch-first form a user writes when the
function allows it, as tf.data users write ``batch -> map``. The per-element form stays measured next to it.

``PIPELINES`` lists them with what the report needs: the unit, the hand-written baseline, whether the
AUTOTUNE check applies, and the bytes a pipeline keeps in flight in its buffers (for the memory check:
nominal capacities, in bytes, from the sizes below).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from . import baselines
from . import workloads as w


class Unavailable(Exception):
    """A pipeline needs a part of jaxfeed that is not there yet (skipped with this message)."""


def _formats(*names):
    try:
        import jaxfeed.formats as formats
    except ImportError as e:
        raise Unavailable(f"jaxfeed.formats cannot be imported ({e})") from None
    missing = [n for n in names if not hasattr(formats, n)]
    if missing:
        raise Unavailable(f"jaxfeed.formats has no {', '.join(missing)} yet")
    return [getattr(formats, n) for n in names]


def _dataset():
    from jaxfeed.pipeline import AUTOTUNE, Dataset

    return Dataset, AUTOTUNE


def p1(d, npc=None):
    Dataset, _ = _dataset()
    return Dataset.range(d.sizes["p1_n"]).map(w.add_one).batch(w.P1_BATCH)


def p1_vectorized(d, npc=None):
    """P1 with the map declared ``vectorized=True`` (``x + 1`` works on a batch too): once per batch."""
    Dataset, _ = _dataset()
    return Dataset.range(d.sizes["p1_n"]).map(w.add_one, vectorized=True).batch(w.P1_BATCH)


def p1_per_element(d, npc=None):
    """P1 with the elementwise proof switched off: ``add_one`` called once per element, the per-element
    machinery's cost (what P1 as ported cost before the vectorized_map pass proved ``x + 1`` elementwise)."""
    Dataset, _ = _dataset()
    from jaxfeed.pipeline import Options

    opts = Options()
    opts.experimental_optimization.elementwise_vectorization = False
    return Dataset.range(d.sizes["p1_n"]).map(w.add_one).batch(w.P1_BATCH).with_options(opts)


def p2(d, npc=None):
    Dataset, AUTOTUNE = _dataset()
    return (Dataset.from_tensor_slices(d.rows)
            .shuffle(w.P2_BUFFER, seed=w.SEED)
            .batch(w.P2_BATCH)
            .prefetch(AUTOTUNE))


def p3(d, npc=None):
    Dataset, AUTOTUNE = _dataset()
    (TFRecordDataset,) = _formats("TFRecordDataset")
    npc = AUTOTUNE if npc is None else npc
    files = Dataset.from_tensor_slices(d.tfrecord_files)
    return (files.interleave(TFRecordDataset, cycle_length=w.P3_CYCLE, num_parallel_calls=npc)
            .map(w.parse_record, num_parallel_calls=npc)
            .batch(w.P3_BATCH)
            .prefetch(AUTOTUNE))


def p3_vectorized(d, npc=None):
    """P3 with the parse declared ``vectorized=True``: one ``frombuffer`` + ``sum(axis=1)`` per batch."""
    Dataset, AUTOTUNE = _dataset()
    (TFRecordDataset,) = _formats("TFRecordDataset")
    npc = AUTOTUNE if npc is None else npc
    files = Dataset.from_tensor_slices(d.tfrecord_files)
    return (files.interleave(TFRecordDataset, cycle_length=w.P3_CYCLE, num_parallel_calls=npc)
            .map(w.parse_record_or_batch, num_parallel_calls=npc, vectorized=True)
            .batch(w.P3_BATCH)
            .prefetch(AUTOTUNE))


def p3_read_stage(d, npc=None):
    """P3's read stage alone: the interleaved TFRecord files (CRC on) batched, no parse. Its MB/s against
    raw ``read()`` is what the reader target measures: the CRC/framing walk, not P3's per-record parse."""
    Dataset, AUTOTUNE = _dataset()
    (TFRecordDataset,) = _formats("TFRecordDataset")
    npc = AUTOTUNE if npc is None else npc
    files = Dataset.from_tensor_slices(d.tfrecord_files)
    return files.interleave(TFRecordDataset, cycle_length=w.P3_CYCLE, num_parallel_calls=npc).batch(w.P3_BATCH)


def p4(d, npc=None):
    Dataset, AUTOTUNE = _dataset()
    npc = AUTOTUNE if npc is None else npc
    return (Dataset.from_tensor_slices(d.images)
            .map(w.augment_with_rng, num_parallel_calls=npc, with_rng=True, seed=w.SEED)
            .batch(w.P4_BATCH))


def p4_vectorized(d, npc=None):
    """P4 with the augmentation declared ``vectorized=True``: flip + normalise once per batch.

    ``with_rng`` maps stay per element (the vectorized_map pass skips them), so the flip is keyed on the
    element's position instead (``workloads.flips_keyed``), as tf.data's ``stateless_random_flip_left_right``
    keyed on (seed, index) is: deterministic under any batching and parallelism. The position comes in as a
    column of the slices, ``(arange(n), images)``: ``enumerate()`` (a zip with a range) is not gathered as
    one index stream, so the batch would be pulled and stacked element by element (about 1.5x slower)."""
    Dataset, AUTOTUNE = _dataset()
    npc = AUTOTUNE if npc is None else npc
    positions = np.arange(len(d.images), dtype=np.int64)
    return (Dataset.from_tensor_slices((positions, d.images))
            .map(w.augment_keyed, num_parallel_calls=npc, vectorized=True)
            .batch(w.P4_BATCH))


def p5(d, npc=None):
    Dataset, AUTOTUNE = _dataset()
    npc = AUTOTUNE if npc is None else npc
    return (Dataset.from_tensor_slices(d.lines)
            .map(w.tokenize, num_parallel_calls=npc, executor="process")
            .batch(w.P5_BATCH))


def p6(d, npc=None):
    _dataset()
    (ParquetDataset,) = _formats("ParquetDataset")
    return ParquetDataset(d.parquet_files).batch(w.P6_BATCH)


# ---------------------------------------------------------------------------------------------- as ported
# Each pipeline written exactly as for tf.data, with the Python function the DataLoader and Grain peers run:
# what a user porting tf.data code has before rewriting anything. P1 and P3 are already that (``p1``, ``p3``).
def p4_as_ported(d, npc=None):
    """P4 as ported: ``enumerate() -> map(fn, AUTOTUNE) -> batch``, the flip keyed on the index in Python
    (``workloads.augment_at``, the DataLoader peer's ``__getitem__``) where tf.data would call
    ``stateless_random_flip_left_right``; no ``with_rng``, no ``vectorized``."""
    Dataset, AUTOTUNE = _dataset()
    npc = AUTOTUNE if npc is None else npc
    return (Dataset.from_tensor_slices(d.images).enumerate()
            .map(w.augment_at, num_parallel_calls=npc)
            .batch(w.P4_BATCH))


def p5_as_ported(d, npc=None):
    """P5 as ported: ``map(tokenize, num_parallel_calls=AUTOTUNE)`` with no executor named (tf.data has no
    such argument): whether processes pay is AUTOTUNE's to find."""
    Dataset, AUTOTUNE = _dataset()
    npc = AUTOTUNE if npc is None else npc
    return Dataset.from_tensor_slices(d.lines).map(w.tokenize, num_parallel_calls=npc).batch(w.P5_BATCH)


def p6_signature():
    """P6's rows as ``from_generator`` declares them (the Parquet files' columns; text is a string)."""
    from jaxfeed.pipeline import TensorSpec

    return {"id": TensorSpec((), np.int64), "label": TensorSpec((), np.int32),
            "score": TensorSpec((), np.float32), "weight": TensorSpec((), np.float64),
            "text": TensorSpec((), object)}


def p6_as_ported(d, npc=None):
    """P6 as ported: tf.data has no Parquet reader, so a port reads rows in Python -- one ``from_generator``
    per file (``workloads.parquet_rows``, the DataLoader peer's generator), interleaved, then batched."""
    Dataset, AUTOTUNE = _dataset()
    npc = AUTOTUNE if npc is None else npc
    signature = p6_signature()
    files = Dataset.from_tensor_slices(d.parquet_files)
    return (files.interleave(lambda f: Dataset.from_generator(w.parquet_rows, args=(f,),
                                                              output_signature=signature),
                             cycle_length=w.P6_CYCLE, num_parallel_calls=npc)
            .batch(w.P6_BATCH))


@dataclasses.dataclass(frozen=True)
class Pipeline:
    key: str
    title: str
    unit: str  # what one element is
    make: Callable  # (data, npc) -> Dataset
    baseline: Callable  # (data) -> iterable of batches
    element_bytes: Callable  # (sizes) -> bytes of one output element
    in_flight: Callable  # (sizes) -> nominal bytes held in the pipeline's buffers
    tunable: bool = False  # has a parallel stage: run the AUTOTUNE check
    target_peers: str = "any"  # which peers count for the peer target ("python": same Python function)
    vectorized: Callable | None = None  # (data, npc) -> Dataset: the same pipeline, map(..., vectorized=True)
    as_ported: Callable | None = None  # (data, npc) -> Dataset: written as for tf.data (``make`` when it is that)
    extra_baselines: dict = dataclasses.field(default_factory=dict)  # {label: (data) -> batches}
    shown_forms: dict = dataclasses.field(default_factory=dict)  # {label: (data, npc) -> Dataset}: not judged


def _p3_bytes(s):
    return s["p3_bytes"] + 8


def _p3_in_flight(s):
    """What P3 may hold, from the engine's constants (imported, so they stay in sync), each at its bound:

    - the parallel interleave's slots: ``cycle`` current ones and up to ``cycle`` future ones opened ahead
      (``pipeline/iterators/parallel_interleave.py``). Each keeps under ``READ_DEPTH`` + 1 reads of ``read``
      records buffered (a read is queued when fewer than ``READ_DEPTH`` reads remain; ``read`` is
      ``interleave.READ_AHEAD``, or ``READ_BYTES`` worth of large records), and its TFRecord reader
      (``formats/tfrecord.py``) holds its read buffer -- the C walker's reused one, ``REUSED_BLOCK_SIZE`` +
      ``TAIL_COPY``, else a ``BLOCK_SIZE`` block -- plus the records split out of that block, which the
      reader's list keeps until its next block; and up to ``SPARE_BUFFERS`` closed readers' buffers and
      the C walker's ring of payload objects kept for reuse (``RING_BYTES``, ``formats/_tfrecord_c.c``);
    - the fused map+batch (``map_batch.py``): up to 2 x parallelism batches in flight, parallelism up to
      one per CPU under AUTOTUNE, each its 256 input records and its output arrays;
    - prefetch(AUTOTUNE) (``prefetch.py``): up to ``MAX_AUTOTUNE`` batches, plus the batch the consumer
      holds.
    Records are bytes objects (payload + ``sys.getsizeof(b"")``); a batch row is ``_p3_bytes``."""
    import sys

    from jaxfeed.formats import tfrecord
    from jaxfeed.pipeline.iterators import interleave, parallel_interleave, prefetch

    payload = s["p3_bytes"]
    record = payload + sys.getsizeof(b"")
    if tfrecord._split_records is not None:  # the C walker: one reused buffer per open file
        buffer = tfrecord.REUSED_BLOCK_SIZE + tfrecord.TAIL_COPY
    else:
        buffer = tfrecord.BLOCK_SIZE
    split = buffer // (payload + tfrecord.FRAMING) * record
    read = max(1, min(interleave.READ_AHEAD, interleave.READ_BYTES // payload))
    slots = 2 * w.P3_CYCLE * (buffer + split + (parallel_interleave.READ_DEPTH + 1) * read * record)
    if tfrecord._split_records is not None:  # closed readers' buffers kept for the next ones, and the
        from jaxfeed.formats import _tfrecord_c  # payload objects the walker holds for reuse

        ring = _tfrecord_c.RING_BYTES + _tfrecord_c.RING_ITEMS * sys.getsizeof(b"")
        slots += tfrecord.SPARE_BUFFERS * buffer + ring
    batch = w.P3_BATCH * _p3_bytes(s)
    mapping = 2 * _cpus() * (w.P3_BATCH * record + batch)
    return slots + mapping + (prefetch.MAX_AUTOTUNE + 1) * batch


def _cpus():
    """CPUs a pipeline may use by default: AUTOTUNE's parallelism bound (``IteratorContext.cpu_count``)."""
    from jaxfeed.pipeline.engine.context import IteratorContext

    return IteratorContext().cpu_count


def _p4_in_flight(s):
    """What P4's fused map+batch (``map_batch.py``) may hold: up to 2 x parallelism batches in flight
    (parallelism up to one per CPU under AUTOTUNE), each its gathered uint8 input and its float32 output,
    plus the batch the consumer holds (as P3's count has it)."""
    pixels = w.P4_BATCH * s["p4_side"] ** 2 * 3
    return 2 * _cpus() * pixels * (1 + 4) + pixels * 4


def _p5_in_flight(s):
    """What P5's process map (``pipeline/iterators/process_map.py``) may hold: ``DEPTH`` tasks per worker (a
    worker per CPU under AUTOTUNE), each of up to ``MAX_BLOCK`` lines, every one held twice -- the consumer's
    pickled task and the worker's unpickled lines, the worker's results and the answer the consumer reads --
    plus two batches (the one being gathered and the one the consumer holds). A line is ~300 bytes with its
    object; a result, a 32-int32 array with its object. (Counted since the memory probe counts the workers'
    memory too; the earlier nominal, eight batches of lines, predates tasks of ``MAX_BLOCK`` lines.)"""
    import sys

    from jaxfeed.pipeline.iterators import process_map

    result = sys.getsizeof(np.zeros(w.P5_LENGTH, np.int32))
    tasks = process_map.DEPTH * _cpus()
    return 2 * tasks * process_map.MAX_BLOCK * (300 + result) + 2 * w.P5_BATCH * w.P5_LENGTH * 4


P6_ROW_GROUP = 8192  # rows per Parquet row group, as bench/data.py's write_parquet writes them
P6_ARROW_ROW = 8 + 4 + 4 + 8 + (4 + 8)  # one row decoded in Arrow: id, label, score, weight, text (offset + ~8 chars)
P6_NUMPY_ROW = 8 + 4 + 4 + 8 + (8 + 48)  # one row of an output batch: text as a pointer to a ~48-byte bytes object


def _p6_in_flight(s):
    """What ParquetDataset(files).batch(256) holds (formats/arrow.py): ``CACHE_UNITS`` decoded row groups
    (Arrow buffers; the numeric numpy columns are views of them, strings stay Arrow), ``OPEN_FILES`` open
    Parquet readers, each keeping about one row group's decode buffers, and two batches as numpy (the one
    being gathered and the one the consumer holds)."""
    from jaxfeed.formats.arrow import CACHE_UNITS, OPEN_FILES

    unit = min(P6_ROW_GROUP, s["p6_rows"]) * P6_ARROW_ROW
    return (CACHE_UNITS + OPEN_FILES) * unit + 2 * w.P6_BATCH * P6_NUMPY_ROW


PIPELINES = {
    "P1": Pipeline("P1", "per-element overhead: range -> map(x+1) -> batch(1024)", "elem", p1, baselines.p1,
                   lambda s: 8, lambda s: 2 * w.P1_BATCH * 8, vectorized=p1_vectorized, as_ported=p1,
                   extra_baselines={"hand loop over numpy int64 scalars": baselines.p1_numpy_scalars},
                   shown_forms={"jaxfeed per element (elementwise_vectorization off)": p1_per_element}),
    "P2": Pipeline("P2", "in-memory slices: shuffle(10,000) -> batch(256) -> prefetch", "row", p2,
                   baselines.p2, lambda s: s["p2_cols"] * 4,
                   # shuffle buffer of rows + a few prefetched batches
                   lambda s: (w.P2_BUFFER + 4 * w.P2_BATCH) * s["p2_cols"] * 4),
    "P3": Pipeline("P3", "TFRecord: interleave(4) -> map(parse) -> batch(256) -> prefetch", "record", p3,
                   baselines.p3, _p3_bytes,
                   _p3_in_flight, tunable=True,
                   vectorized=p3_vectorized, as_ported=p3),
    "P4": Pipeline("P4", "numpy map: flip + normalise (seeded), parallel -> batch(128)", "img", p4,
                   baselines.p4, lambda s: s["p4_side"] ** 2 * 3 * 4, _p4_in_flight, tunable=True,
                   vectorized=p4_vectorized, as_ported=p4_as_ported,
                   extra_baselines={"hand loop on 2 threads": baselines.p4_two_threads}),
    "P5": Pipeline("P5", "Python map: tokenize lines, process workers -> batch(256)", "line", p5, baselines.p5,
                   lambda s: w.P5_LENGTH * 4, _p5_in_flight,
                   tunable=True, target_peers="python", as_ported=p5_as_ported),
    "P6": Pipeline("P6", "Parquet: files -> rows -> batch(256)", "row", p6, baselines.p6,
                   lambda s: 8 + 4 + 4 + 8 + 16, _p6_in_flight, as_ported=p6_as_ported,
                   extra_baselines={"hand loop over the generator's rows": baselines.p6_generator_rows}),
}

ORDER = ["P1", "P2", "P3", "P4", "P5", "P6", "P7"]

