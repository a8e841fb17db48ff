"""``jaxfeed.data``: tf.data's namespace, so ported code changes one import.

    import jaxfeed.data as tfdata          # was: tf.data
    ds = tfdata.TFRecordDataset(files).map(parse, num_parallel_calls=tfdata.AUTOTUNE).batch(256)

Every name re-exports the implementation in ``jaxfeed.pipeline`` or ``jaxfeed.formats``;
``docs/porting.md`` lists each tf.data name and what it maps to.
"""

from jaxfeed.formats import TextLineDataset, TFRecordDataset
from jaxfeed.formats.fixed_length import FixedLengthRecordDataset
from jaxfeed.pipeline import (AUTOTUNE, INFINITE_CARDINALITY, UNKNOWN_CARDINALITY, Dataset, DatasetSpec, Options,
                              ThreadingOptions)
from jaxfeed.pipeline.dataset_iterator import DatasetIterator as Iterator

from . import experimental

__all__ = ["AUTOTUNE", "INFINITE_CARDINALITY", "UNKNOWN_CARDINALITY", "Dataset", "DatasetSpec", "Options",
           "ThreadingOptions", "Iterator", "TFRecordDataset", "TextLineDataset", "FixedLengthRecordDataset",
           "experimental"]
