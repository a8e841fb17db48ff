"""tf.data.experimental's transformation functions: each returns a function ``Dataset -> Dataset`` for
``Dataset.apply``, so ``ds.apply(tf.data.experimental.unique())`` ports by changing the import.

Each is a thin spelling of a ``Dataset`` method; the behaviour (and its tests) lives with the method.
"""

from __future__ import annotations

from .nodes.base import INFINITE


def scan(initial_state, scan_func):
    return lambda ds: ds.scan(initial_state, scan_func)


def group_by_window(key_func, reduce_func, window_size=None, window_size_func=None):
    return lambda ds: ds.group_by_window(key_func, reduce_func, window_size, window_size_func)


def bucket_by_sequence_length(element_length_func, bucket_boundaries, bucket_batch_sizes, padded_shapes=None,
                              padding_values=None, pad_to_bucket_boundary=False, no_padding=False,
                              drop_remainder=False):
    return lambda ds: ds.bucket_by_sequence_length(element_length_func, bucket_boundaries, bucket_batch_sizes,
                                                   padded_shapes, padding_values, pad_to_bucket_boundary,
                                                   no_padding, drop_remainder)


def unique():
    return lambda ds: ds.unique()


def ignore_errors(log_warning=False):
    return lambda ds: ds.ignore_errors(log_warning)


def take_while(predicate):
    return lambda ds: ds.take_while(predicate)


def enumerate_dataset(start=0):
    return lambda ds: ds.enumerate(start)


def assert_cardinality(expected_cardinality):
    def apply(ds):
        from .dataset import Dataset
        from .nodes.assert_cardinality import AssertCardinality

        return Dataset(AssertCardinality(ds._node, expected_cardinality))

    return apply


def shuffle_and_repeat(buffer_size, count=None, seed=None):
    """Deprecated in TF for ``shuffle(...).repeat(...)``, which is what it is: each epoch reshuffles."""
    return lambda ds: ds.shuffle(buffer_size, seed=seed).repeat(count)


def parallel_interleave(map_func, cycle_length, block_length=1, sloppy=False, buffer_output_elements=None,
                        prefetch_input_elements=None):
    """``interleave`` with ``cycle_length`` parallel calls. ``sloppy=True`` lets TF deliver out of order;
    we stay deterministic (allowed: sloppy only permits reordering). The buffer arguments are tuning hints
    the engine's own buffering replaces."""
    return lambda ds: ds.interleave(map_func, cycle_length=cycle_length, block_length=block_length,
                                    num_parallel_calls=cycle_length, deterministic=None if not sloppy else False)


def map_and_batch(map_func, batch_size, num_parallel_batches=None, drop_remainder=False, num_parallel_calls=None):
    """``map`` then ``batch`` (the engine fuses them itself). As in TF, ``num_parallel_batches`` and
    ``num_parallel_calls`` are exclusive; parallel batches run ``batch_size`` calls each."""
    if num_parallel_batches is not None and num_parallel_calls is not None:
        raise ValueError("`num_parallel_batches` and `num_parallel_calls` are mutually exclusive.")
    if num_parallel_batches is not None:
        num_parallel_calls = num_parallel_batches * batch_size
    return lambda ds: ds.map(map_func, num_parallel_calls=num_parallel_calls).batch(batch_size, drop_remainder)


def cardinality(dataset) -> int:
    return dataset.cardinality()


def get_single_element(dataset):
    return dataset.get_single_element()


__all__ = ["INFINITE", "assert_cardinality", "bucket_by_sequence_length", "cardinality", "enumerate_dataset",
           "get_single_element", "group_by_window", "ignore_errors", "map_and_batch", "parallel_interleave",
           "scan", "shuffle_and_repeat", "take_while", "unique"]
