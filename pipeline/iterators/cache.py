"""``cache`` iterators: the first use decides between replaying a finished cache and recording one.

A pass that is read only partly, or in which the input raised an error, is not recorded (the replay
would differ from it); a warning says so and the next complete, clean pass records the cache.

Saved state, by mode (documented choices):

- recording in memory: the input's state plus the elements recorded so far, so a restored iterator
  finishes the recording (as tf.data does);
- replaying from memory: the position plus the cached elements -- a fresh pipeline restored from a
  checkpoint has an empty store, so the checkpoint must carry the cache (use a file cache for big data);
- recording to a file: only the input's state. The restored iterator finishes the pass *without* writing
  (a checkpoint must not carry a whole file cache); the next complete pass writes the cache;
- replaying from a file: the position only.
"""

from __future__ import annotations

import logging

from .base import BlockIterator
from .cache_file import CacheReader, CacheWriter, finished
from ..engine.registry import builds
from ..nodes.cache import Cache
from ..structure import read_only_element

log = logging.getLogger("jaxfeed")

READ_AHEAD = 256  # records decoded per file read

PARTIAL_PASS_WARNING = (
    "%s: The calling iterator did not fully read the dataset being cached. In order to avoid unexpected "
    "truncation of the dataset, the partially cached contents of the dataset will be discarded. This can "
    "happen if you have an input pipeline similar to `dataset.cache().take(k).repeat()`. You should use "
    "`dataset.take(k).cache().repeat()` instead.")


@builds(Cache)
class CacheIterator(BlockIterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self._label = node.label()
        self._in_memory = node.filename == ""
        self.input = None  # built only when the input must run (recording or passing through)
        self._mode = None  # None (not started), "write", "pass", "read" or "done"
        self._recorded: list = []  # in-memory recording
        self._writer = None  # file recording
        self._elements: list | None = None  # in-memory replay
        self._pos = 0
        self._reader = None  # file replay
        self._ahead: list = []  # records decoded by the file replay; those from _ahead_pos on are undelivered
        self._ahead_pos = 0

    # ------------------------------------------------------------------ modes
    def _start(self):
        if self._in_memory:
            if self.node.store.elements is not None:
                self._replay_memory(self.node.store.elements, 0)
            else:
                self._record()
        elif finished(self.node.filename):
            self._replay_file(0)
        else:
            self._writer = CacheWriter(self.node.filename, self._label)  # lockfile and directory checks
            self._record()

    def _record(self, mode="write"):
        self.input = self.ctx.build(self.node.inputs[0])
        self._mode = mode

    def _replay_memory(self, elements, pos):
        self._elements, self._pos, self._mode = elements, pos, "read"

    def _replay_file(self, pos):
        self._reader = CacheReader(self.node.filename, self._label, pos)
        self._ahead, self._ahead_pos = [], 0
        self._mode = "read"

    # ------------------------------------------------------------------ elements
    def _next_many(self, n):
        if self._mode is None:
            self._start()
        mode = self._mode
        if mode == "read":
            return self._read(n)
        if mode == "done":
            return []
        try:
            out = self.input.next_many(n)
        except Exception:
            self._abandon_recording()
            raise
        if mode == "write":
            if out:
                if self._writer is None:  # kept and handed out again: read-only from the first pass on
                    out = [read_only_element(e) for e in out]
                self._record_block(out)
            else:
                self._complete()
        if not out:
            self._mode = "done"
        return out

    def _next(self):
        if self._mode in ("write", "pass"):  # one element: no block slicing upstream
            try:
                element = self.input.next()
            except StopIteration:
                self._next_many(1)  # completes the recording
                raise
            except Exception:
                self._abandon_recording()
                raise
            if self._mode == "write":
                if self._writer is None:
                    element = read_only_element(element)
                self._record_block([element])
            return element
        return super()._next()  # a block of one

    def _read(self, n):
        if self._reader is None:
            out = self._elements[self._pos:self._pos + n]
            self._pos += len(out)
            return out
        if self._ahead_pos == len(self._ahead):
            self._ahead, self._ahead_pos = self._reader.read(max(n, READ_AHEAD)), 0
        start = self._ahead_pos
        out = self._ahead[start:start + n]
        self._ahead_pos = start + len(out)
        return out

    def _record_block(self, block):
        if self._writer is not None:
            self._writer.write(block)
        else:
            self._recorded.extend(block)

    def _abandon_recording(self):
        """An error from the input: a replay would silently differ from this pass, so this pass is not
        recorded (it goes on as a pass-through); the next complete pass records the cache."""
        if self._mode != "write":
            return
        log.warning("%s: an error was raised while recording the cache; this pass will not be cached.",
                    self._label)
        self._recorded = []
        if self._writer is not None:
            self._writer.abort()
            self._writer = None
        self._mode = "pass"

    def _complete(self):
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.finish()
        else:
            self.node.store.publish(self._recorded)
            self._recorded = []

    # ------------------------------------------------------------------ state
    def children(self):
        return [self.input] if self.input is not None else []

    def get_state(self):
        mode = self._mode
        if mode == "write" and self._writer is not None:
            mode = "pass"  # a file recording is not carried over (module docstring)
        state = {"mode": mode}
        if mode in ("write", "pass"):
            state["input"] = self.input.get_state()
        if mode == "write":
            state["recorded"] = list(self._recorded)
        if mode == "read":
            if self._reader is None:
                state.update(pos=self._pos, elements=self._elements)
            else:
                state["pos"] = self._reader.pos - (len(self._ahead) - self._ahead_pos)
        return state

    def set_state(self, state):
        self._discard()
        mode = state["mode"]
        self._mode = mode
        if mode in ("write", "pass"):
            self._record(mode)
            self.input.set_state(state["input"])
            self._recorded = [read_only_element(e) for e in state.get("recorded", [])]
        elif mode == "read":
            if self._in_memory:
                elements = [read_only_element(e) for e in state["elements"]]
                self.node.store.publish(elements)
                self._replay_memory(elements, int(state["pos"]))
            else:
                self._replay_file(int(state["pos"]))

    # ------------------------------------------------------------------ lifetime
    def _discard(self):
        """Drop an unfinished recording (warning when it held anything) and release files."""
        if self._mode == "write" and (self._recorded or (self._writer is not None and len(self._writer.offsets) > 1)):
            log.warning(PARTIAL_PASS_WARNING, self._label)
        self._recorded = []
        if self._writer is not None:
            self._writer.abort()
            self._writer = None
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self.input is not None:
            self.input.close()
            self.input = None
        self._mode = None

    def close(self):
        self._discard()
