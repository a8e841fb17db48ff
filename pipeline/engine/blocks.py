"""Running a user function over a block of elements, keeping failures in place.

A block runs in one tight loop. When the function raises for an element, the exception is stored in that
element's slot (as a ``Failure``) and the loop goes on, so the consumer receives the elements before it,
then the error, then the elements after it -- the order of a sequential run -- and ``ignore_errors`` can
skip exactly the failed element.
"""

from __future__ import annotations

import itertools
import operator

import numpy as np

from .. import c_extensions, structure
from ..iterators.base import Iterator
from .rows import RowQueue
from ..errors import InvalidArgumentError, function_stopped, in_transformation

_PLAIN_LEAVES = (np.ndarray, np.generic, bytes)
_TEXT_SCALARS = (np.str_, np.bytes_)  # numpy values, but strings: normalize makes them plain bytes


def _plain(v) -> bool:
    """``v`` is an element leaf as it is: a numeric numpy value or ``bytes`` (string arrays and numpy string
    scalars still need ``structure.normalize``, which makes their strings bytes)."""
    if type(v) is np.ndarray:
        return v.dtype.kind not in "OSU"
    return isinstance(v, _PLAIN_LEAVES) and not isinstance(v, _TEXT_SCALARS)


def _plain_tuples(out: list) -> bool:
    """Every result a tuple of ``len(out[0])`` plain leaves: checked a column at a time (one type count per
    column; for arrays, one set of their dtypes) instead of a Python call per leaf."""
    n = len(out[0])
    if operator.countOf(map(type, out), tuple) != len(out) or operator.countOf(map(len, out), n) != len(out):
        return False
    for column in zip(*out):
        t = type(column[0])
        if operator.countOf(map(type, column), t) != len(column):
            if not all(map(_plain, column)):
                return False
        elif t is np.ndarray:
            if any(dtype.kind in "OSU" for dtype in {a.dtype for a in column}):
                return False
        elif not issubclass(t, _PLAIN_LEAVES) or issubclass(t, _TEXT_SCALARS):
            return False
    return True


class Failure:
    __slots__ = ("error",)

    def __init__(self, error: BaseException):
        self.error = error


def saved_error(error: BaseException | None) -> Failure | None:
    """An error an iterator holds for a later call (its ``_deferred``: met past the elements it returned), as
    its saved state keeps it -- a ``Failure`` (the checkpoint format saves those), None when there is none.
    Dropping it would make a restored run go on as if the failing elements had never been there."""
    return None if error is None else Failure(error)


def restored_error(saved, where: str) -> BaseException | None:
    """The error a saved state's entry holds (``saved_error``'s form; None for none). Anything else was not
    written by ``get_state``: an InvalidArgumentError naming the entry ``where``."""
    if saved is None:
        return None
    if type(saved) is not Failure:
        raise InvalidArgumentError(f"Iterator state's {where} entry is {type(saved).__name__}, not a saved error. "
                                   "Was it edited?", "set_state")
    return saved.error


# ------------------------------------------------------------------------------ results taken as made
# A map function may return a buffer it reuses (``out[:] = x * 2; return out``). tf.data turns each result
# into a tensor as it is made; a block's results wait in a list here until they are batched, so each one is
# taken as it is made, before the next call: what nothing else can change is kept (a fresh array, memory of
# the input element, numbers, strings), anything else copied. ``pipeline/_values_c.c`` (``taken``) holds
# the rules; without the extension the Python way below keeps only what it can tell is safe without
# reference counts (memory of the input element, immutable values) and copies every other array.
def _memory_owner(a):
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a if a.base is None else a.base


def _input_memory(element, depth=0) -> set:
    """ids of the objects owning the memory of ``element``'s arrays."""
    if depth > 32:
        return set()
    t = type(element)
    if t is dict:
        return set().union(*(_input_memory(v, depth + 1) for v in element.values()))
    if t is list or isinstance(element, tuple):
        return set().union(*(_input_memory(v, depth + 1) for v in element))
    if isinstance(element, np.ndarray):
        return {id(_memory_owner(element))}
    return set()


def snapshot_py(value, keep_array=None, depth=0):
    """``value`` as it is now, the Python way (no reference counts: the C passes of ``pipeline/_values_c.c``
    copy less): every dict, list and bytearray in it copied, tuples rebuilt around copies, every array
    copied unless ``keep_array(array)`` says it cannot change, anything else kept; deeper than ``_values_c``'s
    MAX_DEPTH (a cycle), kept as it is. For a generator's values (``generator_convert``) and, keeping memory
    of the input element, a function's results (``_taken_py``)."""
    if depth > 32:
        return value
    t = type(value)
    if t is dict:
        return {k: snapshot_py(v, keep_array, depth + 1) for k, v in value.items()}
    if t is list:
        return [snapshot_py(v, keep_array, depth + 1) for v in value]
    if isinstance(value, tuple):
        items = [snapshot_py(v, keep_array, depth + 1) for v in value]
        if all(map(operator.is_, items, value)):
            return value
        if t is tuple:
            return tuple(items)
        return t._make(items) if hasattr(t, "_make") else value  # a namedtuple; other subclasses kept
    if t is bytearray:
        return bytearray(value)
    if isinstance(value, np.ndarray):
        if keep_array is not None and keep_array(value):
            return value
        copy = value.copy(order="K")  # the copy stands for the value as it was given: layout, writability
        if not value.flags.writeable:
            copy.flags.writeable = False
        return copy
    return value


def _taken_py(result, element):
    inputs = _input_memory(element)

    def of_input(array):
        owner = _memory_owner(array)
        return id(owner) in inputs or type(owner) is bytes

    return snapshot_py(result, of_input)


def _call_taken_py(fn, element):
    return _taken_py(fn(element), element)


def _load_taken():
    """``(call_taken, taken)`` of ``pipeline/_values_c.c``, or the Python way: the extension not built, or
    ``JAXFEED_NO_C_EXT=1`` (read at import; tests set ``call_taken`` and ``taken`` here)."""
    c = c_extensions.load("jaxfeed.pipeline._values_c")
    return (_call_taken_py, _taken_py) if c is None else (c.call_taken, c.taken)


# Called through the module (``blocks.taken(...)``), so that tests can switch to the Python way; never
# wrapped in a Python function, which would hold the result and make every fresh result look shared.
call_taken, taken = _load_taken()


def apply_block(fn, block: list, unpack: bool, label: str, first_position: int, extra=None):
    """``[fn(x) for x in block]`` with tf.data's argument unpacking and failures kept in place.

    Returns ``(results, failed)`` where ``failed`` says whether any slot holds a ``Failure`` -- one the
    function raised, or a result that is not an element (None, a set, a lock...): both are raised in the
    consumer, never delivered. ``extra``, when given, is a function ``position -> value`` whose result is
    passed as a last argument (per-element RNGs).
    """
    out, failed = run_block(fn, block, unpack, label, first_position, extra)
    out, bad = normalize_results(out, label, first_position)
    return out, failed or bad


def extend_in_place(out: list, calls, total: int, label: str, first_position: int) -> bool:
    """``out.extend(calls())`` until ``out`` holds ``total`` results, whether any failed. ``calls()`` maps a user
    function over the rest of one input iterator, in C (about 30 ns per element cheaper than a Python
    for-loop); ``list.extend`` keeps what it appended before an exception, which goes in its element's place
    as a ``Failure``, and the loop resumes after it. So does a ``StopIteration``, which ``map()`` takes for its
    own end (the rest of the block was dropped silently before: ``errors.function_stopped``)."""
    failed = False
    while True:
        try:
            out.extend(calls())
        except Exception as e:  # noqa: BLE001 - user code; raised in the consumer, in place
            out.append(Failure(in_transformation(e, label, first_position + len(out))))
            failed = True
            continue
        if len(out) >= total:
            return failed
        at = first_position + len(out)
        out.append(Failure(in_transformation(function_stopped(label, at), label, at)))
        failed = True


def run_block(fn, block, unpack: bool, label: str, first_position: int, extra=None):
    """``apply_block`` without turning the results into elements: the function's return values as they
    are (failures in place), for a caller that checks them itself (the fused map and batch). Each result is
    taken as it is made (``taken``): a function may return a buffer it reuses."""
    out = []
    append = out.append
    failed = False
    if extra is None and not unpack:
        it = iter(block)
        failed = extend_in_place(out, lambda: map(call_taken, itertools.repeat(fn), it), len(block), label,
                                 first_position)
    else:
        for i, x in enumerate(block):
            try:
                args = x if (unpack and type(x) is tuple) else (x,)
                if extra is not None:
                    args = args + (extra(first_position + i),)
                append(taken(fn(*args), x))  # (no name holds the result: "only the caller holds it" reads true)
            except Exception as e:  # noqa: BLE001
                append(Failure(in_transformation(e, label, first_position + i)))
                failed = True
    return out, failed


def normalize_results(out: list, label: str, first_position: int | None = None) -> tuple[list, bool]:
    """Turn function results into elements (lists become tuples, Python scalars numpy values).

    Returns ``(elements, bad)``: a result that is not an element becomes a ``Failure`` in its slot (the error
    names the transformation and the element) and ``bad`` says that one did -- the caller must count it as
    failed, or the ``Failure`` would be delivered as an element. Blocks of one plain leaf type or of flat
    tuples of plain leaves (the common cases) are checked by type alone, once per block."""
    if not out:
        return out, False
    t = type(out[0])
    if issubclass(t, _PLAIN_LEAVES) and len(set(map(type, out))) == 1 and (
            all(map(_plain, out)) if t is np.ndarray or issubclass(t, _TEXT_SCALARS) else True):
        return out, False
    if t is tuple and _plain_tuples(out):
        return out, False  # flat tuples of numpy values (the common multi-output map) are elements already
    result = []
    bad = False
    what = f"result of {label}"
    for i, o in enumerate(out):
        if type(o) is Failure:
            result.append(o)
            continue
        try:
            result.append(structure.normalize(o, what))
        except Exception as e:  # noqa: BLE001 - not an element: raised in the consumer in its place
            at = None if first_position is None else first_position + i
            result.append(Failure(in_transformation(e, label, at)))
            bad = True
    return result, bad


def drop_args(future) -> None:
    """Done callback of a submitted block: once finished (or cancelled) it no longer needs its inputs,
    kept on ``future.args`` so that the consumer can run the block itself if no worker has started it."""
    future.args = None


class Delivery:
    """Hands out a block's results one by one or in runs, raising failures in their place."""

    __slots__ = ("items", "pos", "failed")

    def __init__(self, items=(), failed=False):
        self.items = list(items)
        self.pos = 0
        self.failed = failed

    @classmethod
    def of(cls, items) -> "Delivery":
        """A delivery of ``items`` that finds its failures itself (for results from a saved state)."""
        items = list(items)
        return cls(items, any(type(r) is Failure for r in items))

    def __len__(self):
        return len(self.items) - self.pos

    def take(self, n: int) -> list:
        """Up to ``n`` results; raises the failure if it is the first one due."""
        items, pos = self.items, self.pos
        if not self.failed:
            out = items[pos:pos + n]
            self.pos = pos + len(out)
            return out
        end = min(pos + n, len(items))
        for j in range(pos, end):
            if type(items[j]) is Failure:
                if j == pos:
                    self.pos = pos + 1
                    raise items[j].error
                end = j
                break
        out = items[pos:end]
        self.pos = end
        return out

    def remaining(self) -> list:
        """The undelivered results (failures included), for a saved state."""
        return self.items[self.pos:]


class StackedDelivery(Delivery):
    """Failure-free results that arrived stacked (a worker process's block: one array per leaf), held as a
    ``rows.RowQueue``: ``take_rows`` hands out row slices of the block, so a ``batch`` above takes them without
    unstacking and restacking every row; ``take`` (element by element) gives rows."""

    def __init__(self, stacked):  # noqa: D107 - no Delivery.__init__: there is no list of items
        self.failed = False
        self._rows = RowQueue("map")
        self._rows.push(stacked)

    def __len__(self):
        return self._rows.rows

    def take(self, n: int) -> list:
        return self._rows.take_rows(n)

    def take_rows(self, n: int):
        """Up to ``n`` rows as one stacked structure (views of the block's leaves), and their count."""
        k = min(n, self._rows.rows)
        return self._rows.take_batch(k), k

    def remaining(self) -> list:
        pending = self._rows.get_state()["pending"]
        return [row for piece in pending for row in structure.unstack_rows(piece, structure.batched_len(piece))]


class DeliveringIterator(Iterator):
    """A stage that computes results a block at a time into ``self._ready`` (a ``Delivery``) and hands them
    out from there; subclasses implement ``_refill() -> bool`` (False at the end)."""

    _ready: Delivery
    stacks_rows = False  # True where deliveries may be a StackedDelivery (see ``next_rows``)

    def next_rows(self, n: int):
        """Up to ``n`` results as one stacked structure, when they arrived stacked: ``(rows, count)``;
        ``(None, 0)`` at the end, ``(None, -1)`` when the next results are elements (``next_many`` takes them)."""
        if self._deferred is not None:
            self._raise_deferred()
        if not len(self._ready) and not self._refill():
            return None, 0
        ready = self._ready
        if type(ready) is not StackedDelivery:
            return None, -1
        return ready.take_rows(n)

    def _refill(self) -> bool:
        raise NotImplementedError

    def _next(self):
        if not len(self._ready) and not self._refill():
            raise StopIteration
        return self._ready.take(1)[0]

    def _next_many(self, n):
        if not len(self._ready) and not self._refill():
            return []
        return self._ready.take(n)
