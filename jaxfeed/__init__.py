"""jaxfeed: tf.data-style input pipelines, tf.distribute-style strategies on JAX, verifiable determinism.

The subpackages are independent entry points; importing ``jaxfeed`` alone does not import JAX:

- ``jaxfeed.pipeline``    the lazy Dataset graph, its rewrite passes and iterators (no JAX)
- ``jaxfeed.formats``     TFRecord, tf.train.Example, text, CSV, Parquet/Arrow over fsspec
- ``jaxfeed.distribute``  MirroredStrategy / MultiWorkerMirroredStrategy on JAX
- ``jaxfeed.determinism`` enable_op_determinism, seeds, the deterministic rewriter, the checker
"""

__version__ = "0.1.0"
