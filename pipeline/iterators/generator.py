"""``from_generator``: pull from the generator a block at a time, converting each element to the signature.

Converters are built once per iterator from the signature (a closure per structure level), so the
per-element work is the structure walk and one cast check per leaf. State is the number of elements
consumed; a restore calls the generator again and skips that many (see ``nodes/generator.py``).
"""

from __future__ import annotations

import numpy as np

from .. import structure
from ..errors import FailedPreconditionError, InvalidArgumentError
from ..options import ExternalStatePolicy
from .base import BlockIterator
from ..engine.registry import builds
from ..nodes.generator import Generator


class _Mismatch(Exception):
    """A yielded value whose structure is not the signature's (reported with the whole element)."""


def converter(spec, label: str):
    """``value -> element`` for one signature level; raises _Mismatch or InvalidArgumentError."""
    if isinstance(spec, tuple):
        parts = [converter(s, label) for s in spec]
        make = type(spec)._make if structure.is_namedtuple(spec) else tuple

        def convert_tuple(value):
            if not isinstance(value, tuple) or len(value) != len(parts):
                raise _Mismatch
            return make([c(v) for c, v in zip(parts, value)])

        return convert_tuple
    if isinstance(spec, dict):
        parts = {k: converter(s, label) for k, s in spec.items()}

        def convert_dict(value):
            if not isinstance(value, dict) or value.keys() != parts.keys():
                raise _Mismatch
            return {k: c(value[k]) for k, c in parts.items()}

        return convert_dict
    return _leaf_converter(spec, label)


def _leaf_converter(spec, label):
    dtype, shape = spec.dtype, spec.shape
    scalar_type = dtype.type if shape in ((), None) and dtype != structure.STRING else None

    def check_shape(arr):
        if shape is not None and not structure.shape_compatible(shape, np.shape(arr)):
            raise InvalidArgumentError(f"{label}: `generator` yielded an element of shape {np.shape(arr)} where "
                                       f"an element of shape {shape} was expected.", label)
        return arr

    int_scalar = scalar_type is not None and dtype.kind in "iu"

    def convert(value):
        if type(value) is scalar_type:  # the common case: already right
            return value
        if int_scalar and type(value) is int:  # a Python int: numpy refuses what does not fit
            try:
                return scalar_type(value)
            except OverflowError:
                raise InvalidArgumentError(f"{label}: `generator` yielded a value that {dtype} cannot hold "
                                           f"without loss: {value!r:.60}", label) from None
        if isinstance(value, dict):
            raise _Mismatch
        if dtype == structure.STRING:
            if isinstance(value, str):
                value = value.encode()
            if isinstance(value, bytes):
                return check_shape(value if type(value) is bytes else bytes(value))  # np.bytes_ too
            arr = np.asarray(value)
            if arr.dtype.kind not in "SUO":
                raise InvalidArgumentError(f"{label}: `generator` yielded {arr.dtype} data where strings were "
                                           "expected.", label)
            return check_shape(structure.to_array(arr))  # str items (U or object arrays) become bytes
        arr = np.asarray(value)
        if arr.dtype != dtype:
            arr = _cast(arr, dtype, value, label)
        check_shape(arr)
        return arr[()] if arr.ndim == 0 else arr

    return convert


def _cast(arr, dtype, value, label):
    """``arr`` as ``dtype``, refusing any cast that changes a value (tf.data casts silently)."""
    src = arr.dtype
    if src.kind not in "biuf" or dtype.kind not in "biufc" or (dtype.kind == "b" and src.kind != "b"):
        raise InvalidArgumentError(f"{label}: `generator` yielded {src} data where {dtype} was expected: "
                                   f"{value!r:.60}", label)
    with np.errstate(all="ignore"):
        out = arr.astype(dtype)
        if dtype.kind in "iu":
            exact = bool(np.all(np.isfinite(arr))) and np.array_equal(out, arr)
        elif dtype.kind == "f":
            exact = not np.any(np.isinf(out) & ~np.isinf(arr))  # rounding is fine, overflow is not
        else:
            exact = True
    if not exact:
        raise InvalidArgumentError(f"{label}: `generator` yielded a value that {dtype} cannot hold without loss: "
                                   f"{value!r:.60}", label)
    return out


@builds(Generator)
class GeneratorIterator(BlockIterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self._label = node.label()
        self._convert = converter(node.signature, self._label)
        self._gen = None
        self._consumed = 0  # elements taken from the generator (what a restore skips)
        self._replay = 0  # elements to skip when the generator is (re)opened
        self._exhausted = False

    def _generator_error(self, e: Exception) -> InvalidArgumentError:
        err = InvalidArgumentError(f"{type(e).__name__}: {e}\n(raised by the `generator` of {self._label} after "
                                   f"{self._consumed} elements)", self._label)
        err.__cause__ = e
        return err

    def _finish(self):
        self._exhausted = True
        self.close()

    def _open(self):
        self._gen = iter(self.node.generator(*self.node.args))
        for _ in range(self._replay):
            next(self._gen)
        self._replay = 0

    def _next_many(self, n):
        out: list = []
        if self._exhausted:
            return out
        convert = self._convert
        error = None
        try:
            if self._gen is None:
                self._open()
            gen = self._gen
            for _ in range(n):
                value = next(gen)
                self._consumed += 1
                try:
                    out.append(convert(value))
                except _Mismatch:
                    error = InvalidArgumentError(
                        f"{self._label}: `generator` yielded an element that did not match the expected "
                        f"structure. The expected structure was {self.node.signature!r}, but "
                        f"the yielded element was {value!r:.200}.", self._label)
                    break
                except InvalidArgumentError as e:
                    error = e
                    break
        except StopIteration:
            self._finish()
        except Exception as e:  # noqa: BLE001 - the generator's own error ends it (as Python generators do)
            error = self._generator_error(e)
            self._finish()
        if error is not None:
            if not out:
                raise error
            self._deferred = error
        return out

    def get_state(self):
        policy = self.ctx.options.experimental_external_state_policy
        if not self.node.replayable and policy in (None, ExternalStatePolicy.FAIL):  # unset means FAIL
            raise FailedPreconditionError(
                f"{self._label}: Generator is stateful: a Python generator cannot be saved. Declare "
                "from_generator(..., replayable=True) if calling it again yields the same sequence (a restore "
                "then replays it), or set experimental_external_state_policy to WARN or IGNORE.", self._label)
        return {"consumed": self._consumed, "exhausted": self._exhausted}

    def set_state(self, state):
        self.close()
        self._consumed = self._replay = int(state["consumed"])
        self._exhausted = bool(state["exhausted"])

    def close(self):
        gen, self._gen = self._gen, None
        if gen is not None and hasattr(gen, "close"):
            gen.close()
