"""jaxfeed.pipeline: the lazy Dataset graph, its rewrite passes and its iterators (tf.data's API).

    from jaxfeed.pipeline import Dataset, AUTOTUNE
    ds = Dataset.range(10).map(lambda x: x * 2).batch(4)
"""

from . import errors
from .dataset import AUTOTUNE, INFINITE_CARDINALITY, SHARD_HINT, UNKNOWN_CARDINALITY, Dataset
from .dataset_iterator import DatasetIterator, Optional
from .options import (AutoShardPolicy, AutotuneOptions, DistributeOptions, ExecutionOptions, ExternalStatePolicy,
                      OptimizationOptions, Options, ThreadingOptions)
from .ragged import RaggedSpec, RaggedValue, SparseSpec, SparseValue
from .structure import STRING, DatasetSpec, TensorSpec

__all__ = [
    "AUTOTUNE", "INFINITE_CARDINALITY", "SHARD_HINT", "UNKNOWN_CARDINALITY", "Dataset", "DatasetIterator",
    "Optional", "AutoShardPolicy", "AutotuneOptions", "DistributeOptions", "ExecutionOptions",
    "ExternalStatePolicy", "OptimizationOptions", "Options", "ThreadingOptions", "STRING", "DatasetSpec",
    "TensorSpec", "RaggedSpec", "RaggedValue", "SparseSpec", "SparseValue", "errors",
]
