"""``jaxfeed.data.experimental``: tf.data.experimental's names over jaxfeed's implementations.

``service`` is ``jaxfeed.service`` (tf.data service's API on Ray; importing it does not import Ray).
"""

from jaxfeed.formats.batched_readers import make_batched_features_dataset, make_csv_dataset
from jaxfeed.formats.csv import CsvDataset
from jaxfeed.formats.dataset_writer import DatasetTFRecordWriter as TFRecordWriter
from jaxfeed.pipeline import (AUTOTUNE, INFINITE_CARDINALITY, UNKNOWN_CARDINALITY, AutoShardPolicy, AutotuneOptions,
                              DistributeOptions, ExternalStatePolicy, OptimizationOptions, Optional,
                              ThreadingOptions)
from jaxfeed.pipeline.dataset import SHARD_HINT, Dataset
from jaxfeed.pipeline.options import AutotuneAlgorithm
from jaxfeed.distribute import service
from jaxfeed.pipeline.passes.debug_mode import enable_debug_mode
from jaxfeed.pipeline.transformations import (assert_cardinality, at, bucket_by_sequence_length, cardinality,
                                              dense_to_ragged_batch, dense_to_sparse_batch,
                                              enumerate_dataset, from_list, get_single_element, get_structure,
                                              group_by_window, ignore_errors, map_and_batch, pad_to_cardinality,
                                              parallel_interleave, rejection_resample, scan, shuffle_and_repeat,
                                              take_while, unbatch, unique)

INFINITE = INFINITE_CARDINALITY
UNKNOWN = UNKNOWN_CARDINALITY


def Counter(start=0, step=1, dtype=None):  # noqa: N802 - tf.data.experimental's spelling
    """``tf.data.experimental.Counter``: ``start, start + step, ...`` forever (int64 unless ``dtype``)."""
    return Dataset.counter(start, step) if dtype is None else Dataset.counter(start, step, dtype)


def save(dataset, path, compression=None, shard_func=None, checkpoint_args=None):
    dataset.save(path, compression, shard_func, checkpoint_args)


def load(path, element_spec=None, compression=None, reader_func=None):
    return Dataset.load(path, element_spec, compression, reader_func)


def snapshot(path, compression="AUTO", reader_func=None, shard_func=None):
    return lambda ds: ds.snapshot(path, compression, reader_func, shard_func)


def get_next_as_optional(iterator):
    return iterator.get_next_as_optional()


def sample_from_datasets(datasets, weights=None, seed=None, stop_on_empty_dataset=False):
    return Dataset.sample_from_datasets(datasets, weights, seed, stop_on_empty_dataset)


def choose_from_datasets(datasets, choice_dataset, stop_on_empty_dataset=True):
    return Dataset.choose_from_datasets(datasets, choice_dataset, stop_on_empty_dataset)


__all__ = ["dense_to_ragged_batch", "dense_to_sparse_batch", "service", "enable_debug_mode", "AutotuneAlgorithm", "AutotuneOptions", "Optional", "TFRecordWriter", "at", "from_list",
           "get_next_as_optional", "get_structure", "pad_to_cardinality", "unbatch", "AUTOTUNE", "INFINITE_CARDINALITY", "UNKNOWN_CARDINALITY", "INFINITE", "UNKNOWN", "SHARD_HINT",
           "AutoShardPolicy", "DistributeOptions", "ExternalStatePolicy", "OptimizationOptions", "ThreadingOptions",
           "Counter", "CsvDataset", "make_csv_dataset", "make_batched_features_dataset", "assert_cardinality",
           "bucket_by_sequence_length", "cardinality", "choose_from_datasets", "enumerate_dataset",
           "get_single_element", "group_by_window", "ignore_errors", "map_and_batch", "parallel_interleave",
           "rejection_resample", "sample_from_datasets", "save", "load", "snapshot", "scan", "shuffle_and_repeat",
           "take_while", "unique"]
