"""``snapshot`` iterators: read a finished snapshot, or run the input and write one.

Modes: "read" (a finished snapshot exists: its elements, through ``load``'s graph), "write" (running the
input and writing each block; the snapshot is published when the input ends), "pass" (running the input
without writing: another writer holds the shard locks, or this iterator was restored from a checkpoint).

State: in "read" mode the reader's state; otherwise the input's state. A restored writer does not resume
writing (the checkpoint does not carry the elements written so far): it finishes the pass without writing,
and the next complete pass writes the snapshot -- the elements delivered are exactly the input's either way.
"""

from __future__ import annotations

import logging

from .. import graph, saved_dataset
from ..errors import AlreadyExistsError, NotFoundError
from .base import BlockIterator
from ..engine.registry import builds
from ..nodes.snapshot import Snapshot

log = logging.getLogger("jaxfeed")


@builds(Snapshot)
class SnapshotIterator(BlockIterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self._mode = None
        self._inner = None  # the reader's or the input's iterator
        self._writer = None

    def _directory(self) -> str:
        return f"{self.node.path.rstrip('/')}/{graph.fingerprint(self.node.inputs[0])}"

    def _start(self):
        directory = self._directory()
        try:
            saved_dataset.read_meta(directory)
        except NotFoundError:
            self._run_input("write")
            try:
                self._writer = saved_dataset.ShardedWriter(directory, self.node.inputs[0].element_spec,
                                                           self.node.shard_func, self.node.label())
            except AlreadyExistsError:
                log.warning("%s: another writer is writing %s; this pass runs the input without writing.",
                            self.node.label(), directory)
                self._mode = "pass"
            return
        self._read(directory)

    def _read(self, directory):
        reader = saved_dataset.load(directory, reader_func=self.node.reader_func)
        self._inner = self.ctx.build(reader._node)
        self._mode = "read"

    def _run_input(self, mode):
        self._inner = self.ctx.build(self.node.inputs[0])
        self._mode = mode

    def _next_many(self, n):
        if self._mode is None:
            self._start()
        try:
            out = self._inner.next_many(n)
        except Exception:
            self._abort()  # an input error: the pass is not the whole dataset
            raise
        if self._writer is not None:
            if out:
                self._writer.write(out)
            else:
                self._writer.finish()
                self._writer = None
        return out

    def _abort(self):
        if self._writer is not None:
            self._writer.abort()
            self._writer = None
            if self._mode == "write":
                self._mode = "pass"

    def get_state(self):
        if self._mode is None:
            return {"mode": None}
        return {"mode": "read" if self._mode == "read" else "pass", "inner": self._inner.get_state()}

    def set_state(self, state):
        self.close()
        mode = state["mode"]
        if mode is None:
            self._mode = None
        elif mode == "read":
            self._read(self._directory())
            self._inner.set_state(state["inner"])
        else:
            self._run_input("pass")
            self._inner.set_state(state["inner"])

    def children(self):
        return [self._inner] if self._inner is not None else []

    def close(self):
        self._abort()  # a pass left unfinished publishes nothing
        super().close()
        self._inner = None
        self._mode = None
