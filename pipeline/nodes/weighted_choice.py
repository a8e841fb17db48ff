"""``sample_from_datasets`` with ``weights`` given as a Dataset: each element of the weights dataset (a vector
with one weight per input) decides the distribution of one draw, as in tf.data, where this is how
``rejection_resample`` shifts a distribution over time.

The graph is tf.data's: ``zip(weights, random(seed))`` mapped to a categorical draw, feeding
``choose_from_datasets``. Each draw is a pure function of its weight vector and one random int64, so the
sequence is reproducible under the seed and resumes exactly from a checkpoint."""

from __future__ import annotations

import numpy as np

from ..errors import InvalidArgumentError
from .dataset_class import dataset_class


def categorical(weights, bits) -> np.int64:
    """The input index that the uniform double in ``bits`` (a random int64) selects under ``weights``."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise InvalidArgumentError(f"sample_from_datasets: each element of the `weights` dataset must be a vector "
                                   f"of finite, non-negative weights, not all zero; got {w!r}.",
                                   "sample_from_datasets")
    u = float(np.uint64(np.int64(bits).view(np.uint64)) >> np.uint64(11)) * 2.0 ** -53
    cdf = np.cumsum(w) / w.sum()
    last = int(np.flatnonzero(w)[-1])
    return np.int64(min(int(np.searchsorted(cdf, u, side="right")), last))


def sample_with_weight_dataset(datasets, weights, seed, stop_on_empty_dataset, rerandomize_each_iteration):
    Dataset = dataset_class()
    spec = weights.element_spec
    shape = getattr(spec, "shape", None)
    if not hasattr(spec, "dtype") or spec.dtype.kind not in "fiu" or shape is None or len(shape) != 1 or \
            shape[0] not in (None, len(datasets)):
        raise TypeError(f"sample_from_datasets: a `weights` dataset must have vector elements of {len(datasets)} "
                        f"numbers, got {spec!r}.")
    selector = Dataset.zip((weights, Dataset.random(seed, rerandomize_each_iteration))).map(
        categorical, output_signature=Dataset.range(1).element_spec)
    return Dataset.choose_from_datasets(datasets, selector, stop_on_empty_dataset)
