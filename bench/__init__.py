"""jaxfeed.bench: throughput benchmarks on built-in synthetic data (``python -m jaxfeed.bench``)."""
