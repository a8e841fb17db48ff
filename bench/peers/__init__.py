"""Peers: the suite's pipelines written for tf.data, PyTorch's DataLoader and Grain.

Each module runs as ``python -m jaxfeed.bench.peers.<name> <P>[,<P>...] <datadir>`` and prints one JSON
line (after the marker ``JAXFEED_PEER_RESULT``). It needs only numpy, its own framework and the data
files: the runner starts it with ``--peer-python`` (or ``$JAXFEED_PEER_PYTHON``), in its own process.
"""
