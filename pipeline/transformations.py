"""tf.data.experimental's transformation functions: each returns a function ``Dataset -> Dataset`` for
``Dataset.apply``, so ``ds.apply(tf.data.experimental.unique())`` ports by changing the import.

Each is a thin spelling of a ``Dataset`` method; the behaviour (and its tests) lives with the method.
"""

from __future__ import annotations

from .nodes.base import INFINITE
from .nodes.dataset_class import dataset_class  # dataset.py calls this module: it cannot be imported here


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
        return ds.assert_cardinality(expected_cardinality)

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


__all__ = ["dense_to_ragged_batch", "dense_to_sparse_batch", "INFINITE", "assert_cardinality", "at", "from_list", "get_structure", "pad_to_cardinality", "unbatch", "bucket_by_sequence_length", "cardinality", "enumerate_dataset",
           "get_single_element", "group_by_window", "ignore_errors", "map_and_batch", "parallel_interleave",
           "rejection_resample", "scan", "shuffle_and_repeat", "take_while", "unique"]


# ---------------------------------------------------------------------------------------- rejection_resample
DIST_ESTIMATION_BATCH_SIZE = 32  # TF's: the running class estimate is updated every 32 elements


def rejection_resample(class_func, target_dist, initial_dist=None, seed=None):
    """tf.data's ``rejection_resample``: ``(class, element)`` pairs whose class distribution moves to
    ``target_dist``. Built from the same graph as TF's: elements are kept with an acceptance probability per
    class (from ``initial_dist``, or from a running estimate of it, updated every 32 elements) and mixed
    with a pass over the original elements with the probability that the target still needs them. As in
    TF, the two branches are separate passes over the input, and the random draws come from ``random(seed)``
    (reproducible under a seed, fresh without one)."""
    import numpy as np

    target = _distribution(target_dist, "target_dist")

    def apply(ds):
        Dataset = dataset_class()

        def with_class(*x):
            element = x[0] if len(x) == 1 else x
            return np.int32(class_func(*x)), element

        if initial_dist is not None:
            initial = _distribution(initial_dist, "initial_dist")
            if initial.shape != target.shape:
                raise ValueError(f"rejection_resample: initial_dist has {len(initial)} classes, target_dist "
                                 f"{len(target)}.")
            accept, prob_original = _acceptance_with_mixing(initial, target)
            accept_ds = Dataset.from_tensors(accept).repeat()
            original_ds = Dataset.from_tensors(np.float32(prob_original)).repeat()
            static_original = float(prob_original)
        else:
            initial_ds = _estimate_initial_dist(ds.map(lambda *x: np.int64(class_func(*x))), len(target))
            mixed = initial_ds.map(lambda initial: _acceptance_with_mixing(initial, target))
            accept_ds = mixed.map(lambda accept, _: accept)
            original_ds = mixed.map(lambda _, original: original)
            static_original = None

        filtered = (Dataset.zip((accept_ds, ds.map(with_class), Dataset.random(seed)))
                    .filter(lambda accept, pair, bits: _uniform(bits) < accept[int(pair[0])])
                    .map(lambda accept, pair, bits: pair)
                    .prefetch(3))
        if static_original == 1:
            return ds.map(with_class)
        if static_original == 0:
            return filtered
        weights = original_ds.map(lambda p: np.array([p, 1.0 - p], dtype=np.float32))
        return Dataset.sample_from_datasets([ds.map(with_class), filtered], weights=weights, seed=seed,
                                            stop_on_empty_dataset=True)

    return apply


def _distribution(value, what):
    import numpy as np

    dist = np.asarray(value, dtype=np.float32)
    if dist.ndim != 1 or not len(dist) or np.any(dist < 0) or not np.isfinite(dist).all():
        raise ValueError(f"rejection_resample: `{what}` must be a vector of non-negative probabilities, got "
                         f"{value!r}.")
    return dist


def _acceptance_with_mixing(initial, target):
    """TF's ``_calculate_acceptance_probs_with_mixing``: per-class acceptance and the mixing probability."""
    import numpy as np

    ratio = target / (np.asarray(initial, dtype=np.float32) + np.finfo(np.float32).tiny)
    low, high = ratio.min(), ratio.max()
    accept = (ratio - low) / (high - low) if high > low else np.zeros_like(ratio)
    return accept.astype(np.float32), np.float32(low)


def _estimate_initial_dist(class_values, num_classes):
    """Running class frequencies, one vector per element, refreshed every 32 elements (TF's estimate)."""
    import numpy as np

    def update(seen, classes):
        seen = seen + np.bincount(np.asarray(classes, dtype=np.int64), minlength=num_classes)[:num_classes]
        dist = (seen / seen.sum()).astype(np.float32)
        return seen, np.tile(dist[None, :], (len(classes), 1))

    return (class_values.batch(DIST_ESTIMATION_BATCH_SIZE)
            .scan(np.zeros(num_classes, np.int64), update).unbatch())


def _uniform(bits) -> float:
    import numpy as np

    return float(np.int64(bits).view(np.uint64) >> np.uint64(11)) * 2.0 ** -53


# ---------------------------------------------------------------------------------------- small helpers
def unbatch():
    return lambda ds: ds.unbatch()


def dense_to_ragged_batch(batch_size, drop_remainder=False, row_splits_dtype=None):
    import numpy as np

    dtype = np.int64 if row_splits_dtype is None else row_splits_dtype
    return lambda ds: ds.ragged_batch(batch_size, drop_remainder, dtype)


def dense_to_sparse_batch(batch_size, row_shape):
    return lambda ds: ds.sparse_batch(batch_size, row_shape)


def get_structure(dataset):
    return dataset.element_spec


def at(dataset, index):
    """The element at ``index`` (``tf.data.experimental.at``); reads ``index`` elements to get there."""
    from .errors import OutOfRangeError

    index = int(index)
    if index < 0:
        raise OutOfRangeError(f"at: index must be non-negative, got {index}.", "at")
    with iter(dataset.skip(index).take(1)) as it:
        block = it.next_many(1)
    if not block:
        raise OutOfRangeError(f"at: index {index} is past the end of the dataset.", "at")
    return block[0]


def from_list(elements):
    """``tf.data.experimental.from_list``: a dataset of the given elements (same structure and shapes)."""
    from . import structure
    from .errors import InvalidArgumentError

    Dataset = dataset_class()
    elements = [structure.normalize_data(e, "from_list element") for e in elements]
    if not elements:
        raise ValueError("from_list: `elements` must not be empty.")
    try:
        stacked = structure.stack(elements, what="from_list")
    except (TypeError, InvalidArgumentError) as e:
        raise ValueError(f"from_list: the elements must have one structure, dtypes and shapes: {e}") from None
    return Dataset.from_tensor_slices(stacked)


def pad_to_cardinality(cardinality, mask_key="valid"):
    """``tf.data.experimental.pad_to_cardinality``: dict elements padded with zero elements up to
    ``cardinality``, each with ``mask_key`` True for real elements and False for padding (what a
    distributed evaluation needs to count only real examples)."""
    import numpy as np

    def apply(ds):
        from . import structure
        from .errors import InvalidArgumentError

        Dataset = dataset_class()
        spec = ds.element_spec
        if not isinstance(spec, dict):
            raise InvalidArgumentError(f"pad_to_cardinality: the elements must be dicts, got {spec!r}.",
                                       "pad_to_cardinality")
        if mask_key in spec:
            raise InvalidArgumentError(f"pad_to_cardinality: the elements already have the key {mask_key!r}.",
                                       "pad_to_cardinality")
        n = ds.cardinality()
        if n < 0:
            raise InvalidArgumentError("pad_to_cardinality: the dataset must have a known, finite cardinality.",
                                       "pad_to_cardinality")
        if n > cardinality:
            raise InvalidArgumentError(f"pad_to_cardinality: the dataset has {n} elements, more than {cardinality}.",
                                       "pad_to_cardinality")
        leaves = structure.flatten(spec)
        if any(s.shape is None or None in s.shape for s in leaves):
            raise InvalidArgumentError(f"pad_to_cardinality: padding needs fully known shapes, got {spec!r}.",
                                       "pad_to_cardinality")
        def zero(s):
            if s.dtype == structure.STRING:
                return b"" if s.shape == () else np.full(s.shape, b"", dtype=object)
            return np.zeros(s.shape, s.dtype)

        padding = structure.map_structure(zero, spec)

        def mark(valid):
            return lambda element: {**element, mask_key: np.bool_(valid)}

        real = ds.map(mark(True), output_signature={**spec, mask_key: structure.TensorSpec((), np.bool_)})
        pad = Dataset.from_tensors(padding).repeat(cardinality - n).map(mark(False))
        return real.concatenate(pad)

    return apply
