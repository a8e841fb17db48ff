"""``from_generator``: pull from the generator a block at a time, converting the block to the signature.

A block of values comes out of the generator in one C-level call (``list.extend(islice(gen, n))``: no Python
frame of ours per value) and is converted as a whole (``generator_convert.block_converter``: one type check
per structure level, one numpy call per leaf); a block that is not plainly fine goes value by value
(``converter``), which finds and raises the error in its place. Values pulled after a value that failed
wait in ``_pending`` and come first at the next call, so the generator is never asked for more than the
consumer asked for, and an error stands where it stood in the sequence.

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
from .generator_convert import Mismatch, block_converter, converter


@builds(Generator)
class GeneratorIterator(BlockIterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self._label = node.label()
        self._convert = converter(node.signature, self._label)
        self._convert_block = block_converter(node.signature, self._label)
        self._gen = None
        self._consumed = 0  # values converted (delivered, or failed in their place): what a restore skips
        self._replay = 0  # values to skip when the generator is (re)opened
        self._exhausted = False
        self._pending: list = []  # values pulled after a value that failed, converted before pulling more
        self._end_error = None  # the generator's own error, raised after the pending values

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
            values.extend(itertools.islice(self._gen, n))  # keeps the values before an error
        except Exception as e:  # noqa: BLE001 - the generator's own error ends it (as Python generators do)
            self._end_error = self._generator_error(e, self._consumed + len(values))
            self._finish()
            return values
        if len(values) < n:
            self._finish()
        return values

    def _next_many(self, n):
        if self._pending:
            values, self._pending = self._pending[:n], self._pending[n:]
        else:
            if self._end_error is not None:
                error, self._end_error = self._end_error, None
                raise error
            values = self._pull(n)
        out, error = self._converted(values)
        if error is None and not self._pending and self._end_error is not None:
            error, self._end_error = self._end_error, None
        if error is not None:
            if not out:
                raise error
            self._deferred = error
        return out

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
        return {"consumed": self._consumed, "exhausted": self._exhausted and not self._pending}

    def set_state(self, state):
        self.close()
        self._consumed = self._replay = int(state["consumed"])
        self._exhausted = bool(state["exhausted"])
        self._pending, self._end_error = [], None

    def close(self):
        gen, self._gen = self._gen, None
        if gen is not None and hasattr(gen, "close"):
            gen.close()
