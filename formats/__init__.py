"""jaxfeed.formats: read (and write) the files TensorFlow, Spark and pandas produce, without TensorFlow.

    from jaxfeed.formats import TFRecordDataset, parse_example, FixedLenFeature
    ds = TFRecordDataset(["a.tfrecord", "memory://b.tfrecord"]).batch(256).map(
        lambda b: parse_example(b, {"id": FixedLenFeature([], "int64")}))

Every path is an fsspec URL (local, ``file://``, ``memory://``, ``http://``, or any installed protocol).
"""

from .arrow import ArrowDataset, FeatherDataset, ParquetDataset
from .csv import CsvDataset
from .example import (Example, Feature, FixedLenFeature, FixedLenSequenceFeature, SequenceExample, VarLenFeature,
                      VarLenValue, feature, make_example, make_sequence_example, parse_example, parsed_signature,
                      parse_sequence_example, parse_single_example, parse_single_sequence_example)
from .fs import glob
from .text import TextLineDataset
from .tfrecord import TFRecordOptions, TFRecordWriter
from .tfrecord_dataset import TFRecordDataset

__all__ = [
    "ArrowDataset", "FeatherDataset", "ParquetDataset", "CsvDataset", "TextLineDataset", "TFRecordDataset",
    "TFRecordOptions", "TFRecordWriter", "Example", "SequenceExample", "Feature", "FixedLenFeature",
    "FixedLenSequenceFeature", "VarLenFeature", "VarLenValue", "feature", "make_example", "make_sequence_example",
    "parse_example", "parsed_signature", "parse_sequence_example", "parse_single_example",
    "parse_single_sequence_example", "glob",
]
