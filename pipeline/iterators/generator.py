"""``from_generator``: pull from the generator a block at a time, converting the block to the signature.

A block of values comes out of the generator in one C-level call (``list.extend(islice(gen, n))``: no Python
frame of ours per value) and is converted as a whole (``generator_convert.block_converter``: one type check
per structure level, one numpy call per leaf); a block that is not plainly fine goes value by value
(``converter``), which finds and raises the error in its place. Values pulled after a value that failed
wait in ``_pending`` and come first at the next call, so the generator is never asked for more than the
consumer asked for, and an error stands where it stood in the sequence.

A generator may change an object it yielded and yield it again (a reused dict or array buffer); tf.data
converts each value as it is yielded, so each value is taken as it comes, before the generator resumes: in
the pull, ``generator_convert.snapshot`` copies what something else may still change (``_values_c.c``), and a
flat dict of scalars is taken apart into its columns at once (``generator_convert.dict_puller``, the C pass
where it is built: no copy, and no Python frame of ours per value either).

Under a ``batch`` (directly, or through ``interleave`` or ``flat_map``) a block goes out as columns: ``next_rows(n)`` hands out
the block stacked -- one array per leaf, made by ``generator_convert.column_converter`` in the same numpy
calls the block conversion makes -- so no element (a dict of numpy scalars) is built only to be taken apart
again by the batch (the engine's stacked-rows hand-off, ``engine/blocks.py``). A block that is not plainly
fine goes back to ``_pending`` and the consumer takes it as elements (``next_many``, value by value): every
error, and every element around it, is the same either way.

State is the number of values converted (``consumed``); a restore calls the generator again and skips that
many (see ``nodes/generator.py``). Pending values are not part of it: the replay yields them again.
"""

from __future__ import annotations

import collections
import itertools

from ..errors import FailedPreconditionError, InvalidArgumentError
from ..options import ExternalStatePolicy
from .base import BlockIterator
from ..engine.registry import builds
from ..nodes.generator import Generator
from . import generator_convert
from .generator_convert import Mismatch, block_converter, column_converter, converter


@builds(Generator)
class GeneratorIterator(BlockIterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self._label = node.label()
        self._convert = converter(node.signature, self._label)
        self._convert_block = block_converter(node.signature, self._label)
        self._columns = column_converter(node.signature, self._label)  # None: leaves that are not scalars
        self.stacks_rows = self._columns is not None  # a batch above then asks ``next_rows``
        self._snapshot = generator_convert.snapshot
        # flat dicts of scalars: pulled and taken apart in one C pass (no snapshot copies), as columns for a
        # batch above or as elements
        self._pull_rows = generator_convert.dict_puller(node.signature, self._label) if self.stacks_rows \
            else None
        self._pull_elements = generator_convert.dict_puller(node.signature, self._label, as_elements=True)
        self._gen = None
        self._consumed = 0  # values converted (delivered, or failed in their place): what a restore skips
        self._replay = 0  # values to skip when the generator is (re)opened
        self._exhausted = False
        self._pending: list = []  # values pulled after a value that failed, converted before pulling more
        self._end_error = None  # the generator's own error, raised after the pending values
        self._deferred_counted = False  # the deferred error is a value's, counted in ``_consumed``

    def _generator_error(self, e: Exception, count: int) -> InvalidArgumentError:
        err = InvalidArgumentError(f"{type(e).__name__}: {e}\n(raised by the `generator` of {self._label} after "
                                   f"{count} elements)", self._label)
        err.__cause__ = e
        return err

    def _finish(self):
        self._exhausted = True
        self.close()

    def _open(self):
        self._gen = iter(self.node.generator(*self.node.args))
        collections.deque(itertools.islice(self._gen, self._replay), maxlen=0)  # skip them, in C
        self._replay = 0

    def _pull(self, n) -> list:
        """Up to ``n`` values from the generator; fewer means it ended (or raised: ``_end_error``)."""
        values: list = []
        if self._exhausted:
            return values
        try:
            if self._gen is None:
                self._open()
            # each value snapshotted as it comes, before the generator resumes (it may change an object it
            # yielded: tf.data converts values one at a time); extend keeps the values before an error
            values.extend(map(self._snapshot, itertools.islice(self._gen, n)))
        except Exception as e:  # noqa: BLE001 - the generator's own error ends it (as Python generators do)
            self._end_error = self._generator_error(e, self._consumed + len(values))
            self._finish()
            return values
        if len(values) < n:
            self._finish()
        return values

    def next_rows(self, n):
        """Up to ``n`` values converted as one stacked block: ``(rows, count)``; ``(None, 0)`` at the end;
        ``(None, -1)`` when the next values go as elements (pending values, an error to raise, a block the
        column way does not take: it waits in ``_pending`` for ``next_many``). The engine's stacked-rows
        contract (``blocks.DeliveringIterator.next_rows``)."""
        if self._deferred is not None:
            self._raise_deferred()
        if self._pending or self._end_error is not None:
            return None, -1
        if self._pull_rows is not None:
            return self._pulled_rows(n)
        values = self._pull(n)
        if not values:
            return (None, -1) if self._end_error is not None else (None, 0)
        try:
            rows = self._columns(values)
        except Exception:  # noqa: BLE001 - not a block the column way takes: value by value, in next_many
            rows = None
        if rows is None:
            self._pending = values
            return None, -1
        self._consumed += len(values)
        if self._end_error is not None:  # the generator's error, after these rows (as next_many defers it)
            self._deferred, self._end_error = self._end_error, None
            self._deferred_counted = False
        return rows, len(values)

    def _pulled(self, pull, n):
        """One pull by the C pass (``generator_convert.dict_puller``): ``(taken, count, rows)``, or None when the
        generator failed (kept in ``_end_error``). A value that is not such a row waits in ``_pending``; the
        end, or the generator's error after the rows, is recorded as ``_pull`` records it."""
        if self._exhausted:
            return None
        try:
            if self._gen is None:
                self._open()
            taken, count, stop, extra, rows = pull(self._gen, n)
        except Exception as e:  # noqa: BLE001 - the generator's own error (opening it, a key lookup raising)
            self._end_error = self._generator_error(e, self._consumed)
            self._finish()
            return None
        if stop == 2:  # a value the C pass does not take: after these rows, value by value
            self._pending.append(extra)
        elif stop == 1:
            self._finish()
        elif stop == 3:  # the generator raised: it ends there, after these rows
            self._end_error = self._generator_error(extra, self._consumed + count)
            self._finish()
        return taken, count, rows

    def _pulled_rows(self, n):
        """``next_rows`` by the C pass: rows taken apart as they come. Rows it does not take as columns (mixed
        or unconvertible values) wait in ``_pending`` for ``next_many``, as in ``next_rows``."""
        pulled = self._pulled(self._pull_rows, n)
        if pulled is None:
            return (None, -1) if self._end_error is not None else (None, 0)
        rows, count, elements = pulled
        self._pending = elements + self._pending
        if rows is None:
            return (None, -1) if (self._pending or self._end_error is not None) else (None, 0)
        self._consumed += count
        if self._end_error is not None:  # the generator's error, after these rows (as next_many defers it)
            self._deferred, self._end_error = self._end_error, None
            self._deferred_counted = False
        return rows, count

    def _next_many(self, n):
        while True:
            if self._pending:
                values, self._pending = self._pending[:n], self._pending[n:]
                out, error = self._converted(values)
            else:
                if self._end_error is not None:
                    error, self._end_error = self._end_error, None
                    raise error
                if self._pull_elements is not None:
                    out, error = self._pulled_elements(n)
                else:
                    out, error = self._converted(self._pull(n))
            if out or error is not None or not self._pending:
                break  # (else the pull stopped at a value for the value way, before any row: take it now)
        counted = error is not None  # a value's error: the value is counted in _consumed
        if error is None and not self._pending and self._end_error is not None:
            error, self._end_error = self._end_error, None
        if error is not None:
            if not out:
                raise error
            self._deferred, self._deferred_counted = error, counted
        return out

    def _pulled_elements(self, n):
        """``_converted(_pull(n))`` by the C pass: elements taken apart as they come; rows the block way does not
        take go the value way."""
        pulled = self._pulled(self._pull_elements, n)
        if pulled is None:
            return [], None
        elements, count, rows = pulled
        if elements is not None:
            self._consumed += count
            return elements, None
        return self._converted(rows)

    def _converted(self, values):
        """``(elements, error)``: the block converted; on an error, the elements before it (the values after
        it are kept in ``_pending``)."""
        if not values:
            return values, None
        try:
            out = self._convert_block(values)
        except Exception:  # noqa: BLE001 - not a block the fast way takes: value by value below
            out = None
        if out is not None:
            self._consumed += len(values)
            return out, None
        out = []
        convert = self._convert
        for i, value in enumerate(values):
            self._consumed += 1
            try:
                out.append(convert(value))
            except Mismatch:
                error = InvalidArgumentError(
                    f"{self._label}: `generator` yielded an element that did not match the expected "
                    f"structure. The expected structure was {self.node.signature!r}, but "
                    f"the yielded element was {value!r:.200}.", self._label)
            except InvalidArgumentError as e:
                error = e
            except Exception as e:  # noqa: BLE001 - a conversion that broke in Python: reported as the
                # generator's error and the end of it, as it always was
                self._pending, self._end_error = [], None
                self._finish()
                return out, self._generator_error(e, self._consumed)
            else:
                continue
            self._pending = values[i + 1:] + self._pending
            return out, error
        return out, None

    def get_state(self):
        policy = self.ctx.options.experimental_external_state_policy
        if not self.node.replayable and policy in (None, ExternalStatePolicy.FAIL):  # unset means FAIL
            raise FailedPreconditionError(
                f"{self._label}: Generator is stateful: a Python generator cannot be saved. Declare "
                "from_generator(..., replayable=True) if calling it again yields the same sequence (a restore "
                "then replays it), or set experimental_external_state_policy to WARN or IGNORE.", self._label)
        # pending values are yielded again by the replay, so the generator has not ended for the state
        consumed, exhausted = self._consumed, self._exhausted and not self._pending
        if self._deferred is not None:  # an error not raised yet: the replay meets it again, in its place
            consumed -= self._deferred_counted  # the bad value is converted again (its error again)
            exhausted = False  # the generator's own error: raised again by the replay
        return {"consumed": consumed, "exhausted": exhausted}

    def set_state(self, state):
        self.close()
        self._consumed = self._replay = int(state["consumed"])
        self._exhausted = bool(state["exhausted"])
        self._pending, self._end_error = [], None

    def close(self):
        gen, self._gen = self._gen, None
        if gen is not None and hasattr(gen, "close"):
            gen.close()
