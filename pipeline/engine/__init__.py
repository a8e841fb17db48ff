"""What runs iterator trees: the thread pool and its tuner, block hand-offs, stacked rows, shared memory and
the process workers, and the context an iterator tree is built in."""
