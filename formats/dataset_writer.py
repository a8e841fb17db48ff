"""``tf.data.experimental.TFRecordWriter``: writes a dataset of scalar strings to one TFRecord file."""

from __future__ import annotations

from jaxfeed.pipeline import structure
from jaxfeed.pipeline.errors import InvalidArgumentError

from . import fs
from .tfrecord import TFRecordOptions, TFRecordWriter

_BLOCK = 1024


class DatasetTFRecordWriter:
    """``TFRecordWriter(filename, compression_type=None).write(dataset)``."""

    def __init__(self, filename, compression_type=None):
        self._filename = fs.as_path(filename)
        self._compression = fs.check_compression(compression_type, "TFRecordWriter")

    def write(self, dataset) -> None:
        spec = dataset.element_spec
        if not (isinstance(spec, structure.TensorSpec) and spec.dtype == structure.STRING and spec.shape == ()):
            raise InvalidArgumentError(f"TFRecordWriter: the dataset must have scalar string elements, got {spec!r}.",
                                       "TFRecordWriter")
        with TFRecordWriter(self._filename, TFRecordOptions(self._compression)) as writer, iter(dataset) as it:
            for block in iter(lambda: it.next_many(_BLOCK), []):
                writer.write_many(block)
