"""What every file reader shares: the file-name input, the node base class, and the iterator that reads the
files its input names one after another, block by block, with (file, offset) state.

A reader node's ``inputs[0]`` is a dataset of scalar strings (docs/tf-behaviour.md#tfrecord): given a str or a list we build
``from_tensor_slices(names)``; given a Dataset we use it as is. The auto-shard FILE policy may put a
``shard`` on that input, so the iterator reads whatever names the input yields, in order.
"""

from __future__ import annotations

import numpy as np

from jaxfeed.pipeline import structure
from jaxfeed.pipeline.dataset import Dataset
from jaxfeed.pipeline.iterators.base import BlockIterator
from jaxfeed.pipeline.nodes.base import UNKNOWN, Node
from jaxfeed.pipeline.nodes.common import AUTOTUNE, check_int

from . import fs

SCALAR_STRING = structure.TensorSpec((), structure.STRING)
# num_parallel_reads=AUTOTUNE: TensorFlow takes ceil(#CPUs / 3) files at a time, so the record order
# depends on the machine (docs/tf-behaviour.md#interleave). We fix the cycle length so the order is the same everywhere.
AUTOTUNE_CYCLE_LENGTH = 4


def filenames_node(filenames, what: str) -> Node:
    """The node of file names for ``filenames``: a str, a (nested) list of them, or a Dataset of strings."""
    if isinstance(filenames, Dataset):
        spec = filenames.element_spec
        if not (isinstance(spec, structure.TensorSpec) and spec.dtype == structure.STRING and spec.shape == ()):
            raise TypeError(f"{what}: The `filenames` argument must contain string elements; got a dataset of "
                            f"{structure.describe(spec)}.")
        return filenames._node
    if isinstance(filenames, np.ndarray):
        filenames = filenames.tolist()
    names = []
    _flatten_names(filenames, names, what)
    from jaxfeed.pipeline.nodes.tensor_slices import TensorSlices

    return TensorSlices(np.array(names + [b""], dtype=object)[:-1])  # object array even when empty


def _flatten_names(value, out: list, what: str):
    if isinstance(value, (str, bytes, np.str_, np.bytes_)):
        out.append(value.encode("utf-8") if isinstance(value, str) else bytes(value))
        return
    if hasattr(value, "__fspath__"):
        out.append(str(value.__fspath__()).encode("utf-8"))
        return
    if isinstance(value, (list, tuple)):
        for v in value:
            _flatten_names(v, out, what)
        return
    raise TypeError(f"{what}: The `filenames` argument must contain string elements, got {value!r} "
                    f"({type(value).__name__}).")


def check_parallel_reads(num_parallel_reads, what: str):
    if num_parallel_reads is None:
        return None
    value = check_int(num_parallel_reads, "num_parallel_reads", what)
    if value <= 0 and value != AUTOTUNE:
        from jaxfeed.pipeline.errors import InvalidArgumentError

        raise InvalidArgumentError(f"{what}: num_parallel_reads must be positive or AUTOTUNE, got {value}.", what)
    return value


def parallel_reads(names: Dataset, read_one, num_parallel_reads: int) -> Dataset:
    """tf.data's graph for ``num_parallel_reads=k``: one record from each of k open files in turn."""
    cycle = AUTOTUNE_CYCLE_LENGTH if num_parallel_reads == AUTOTUNE else num_parallel_reads
    return names.interleave(read_one, cycle_length=cycle, block_length=1, num_parallel_calls=cycle)


class FileReaderNode(Node):
    """Base of the nodes that read the files named by ``inputs[0]`` one after another."""

    reads_files = True

    def compute_spec(self):
        return SCALAR_STRING

    def cardinality(self):
        return UNKNOWN

    def files(self):
        """The file names, when the input is known statically (a list given at construction)."""
        source = self.inputs[0]
        if source.random_access():
            names = source.gather(np.arange(source.length(), dtype=np.int64))
            return [fs.as_path(n) for n in np.asarray(names, dtype=object).tolist()]
        return None


class FileRecordsIterator(BlockIterator):
    """Reads the input's files in order. Subclasses implement ``open_file(name, offset)`` returning a block
    source: ``read_block() -> (elements, offsets, error)`` (``offsets[i]`` is where element i starts, in
    the unit the source resumes from; ``error`` is raised after the elements and ends the file) and an
    ``offset`` property (where the next unread element starts), and ``close()``.

    After a damage error the file is finished -- the next call reads the next file, which is what lets
    ``ignore_errors`` go on there -- unless the source says it ``can_continue`` after the damaged element. State: the input's state, the current file and the offset of the next
    element not yet delivered."""

    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        self._filename = None
        self._source = None
        self._reopen_at = None  # a restored position, opened lazily at the next call
        self._items: list = []
        self._offsets = None
        self._i = 0
        self._error = None

    def open_file(self, name: str, offset):
        raise NotImplementedError

    # ------------------------------------------------------------------ reading
    def _next(self):
        i = self._i
        if i < len(self._items):  # the common case, without building a one-element list
            self._i = i + 1
            return self._items[i]
        return super()._next()  # a block of one

    def _next_many(self, n):
        while True:
            i = self._i
            if i < len(self._items):
                if i == 0 and n >= len(self._items):  # the whole block: hand the list over, no copy
                    out, self._items = self._items, []
                    return out
                out = self._items[i:i + n]
                self._i = i + len(out)
                return out
            if self._error is not None:
                error, self._error = self._error, None
                if not getattr(self._source, "can_continue", False):
                    self._finish_file()
                raise error
            if self._source is None and not self._open():
                return []
            if self._source is None:
                continue
            try:
                items, offsets, error = self._source.read_block()
            except Exception:  # a damaged stream (inflate error, unparsable CSV): this file is done
                self._finish_file()
                raise
            self._items, self._offsets, self._i, self._error = items, offsets, 0, error
            if not items and error is None:
                self._finish_file()

    def _open(self) -> bool:
        """Open the next file (or the restored one); False at the end of the input."""
        if self._reopen_at is not None:
            name, offset = self._reopen_at
            self._reopen_at = None
        else:
            try:
                name = fs.as_path(self.input.next())
            except StopIteration:
                return False
            offset = None
        self._filename = name
        try:
            self._source = self.open_file(name, offset)
        except BaseException:
            self._filename = None  # this file is done: the caller may go on with the next one
            raise
        return True

    def _finish_file(self):
        if self._source is not None:
            self._source.close()
        self._source = None
        self._filename = None
        self._items, self._offsets, self._i = [], None, 0

    # ------------------------------------------------------------------ state
    def get_state(self):
        if self._reopen_at is not None:
            name, offset = self._reopen_at
        elif self._filename is None:
            name, offset = None, None
        elif self._i < len(self._items):
            name, offset = self._filename, _plain(self._offsets[self._i])
        elif self._error is not None:
            name, offset = self._filename, _plain(getattr(self._error, "offset", None))
        else:
            name, offset = self._filename, _plain(self._source.offset)
        return {"input": self.input.get_state(), "file": name, "offset": offset}

    def set_state(self, state):
        self.input.set_state(state["input"])
        self._finish_file()
        self._error = None
        if state["file"] is not None:
            self._reopen_at = (state["file"], state["offset"])

    def children(self):
        return [self.input]

    def close(self):
        self._finish_file()
        super().close()


def _plain(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return value
