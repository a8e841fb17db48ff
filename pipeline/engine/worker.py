"""The main loop of a ``map`` worker process (``executor="process"``).

A worker receives the cloudpickled function once, then tasks over its pipe:
``(task_id, position, block, unpack, slab_name, seeds, iteration, stack)``. It runs the block with
``apply_block`` (failures stay in their element's slot), writes big numpy leaves into the lent slab and
answers ``(task_id, seconds per element, slab_name, bytes used or needed, tag, results)``. With ``stack``, a
failure-free block of like elements is stacked into one batch here (tag ``STACKED``), so one array per
leaf crosses instead of one per element.

Exceptions travel pickled with their type; one that cannot be pickled becomes a ``RuntimeError`` carrying
the original type name and traceback text. The loop ends on ``None`` or when the consumer's end of the
pipe closes (the consumer exited), so a worker never outlives its consumer for long.
"""

from __future__ import annotations

import pickle
import time
import traceback

import numpy as np

from .. import structure
from ..iterators.batch import stack_fast
from .blocks import Failure, apply_block
from ..iterators.map import rng_factory
from .processes import fresh_random_state, ignore_interrupts, keep_freed_memory, outlive_no_consumer, take_environment
from .shared_memory import FORGET, STOP, attach
from .slab_blocks import SlabWriter, has_big_leaf, unpack_block

STACKED = "stacked"  # results tag: one stacked batch instead of a list of elements


def main(conn, fn_bytes: bytes, label: str, environ: dict, consumer: int) -> None:
    import cloudpickle

    ignore_interrupts()
    outlive_no_consumer(consumer)
    fresh_random_state()
    keep_freed_memory()
    take_environment(environ)  # (multiprocessing sets the working directory already)
    try:
        fn = cloudpickle.loads(fn_bytes)
    except BaseException as e:  # noqa: BLE001 - report to the consumer, which raises it
        conn.send_bytes(pickle.dumps(("init_error", _portable(e))))
        return
    slabs: dict = {}
    factories: dict = {}
    while True:
        try:
            message = conn.recv_bytes()
        except (EOFError, OSError):
            return
        if message == STOP:
            break
        if message[:1] == FORGET:
            _forget(pickle.loads(message[1:]), slabs)
            continue
        conn.send_bytes(_answer(fn, label, message, slabs, factories))
    for slab in slabs.values():
        _detach(slab)


_KEPT: list = []


def _answer(fn, label: str, message: bytes, slabs: dict, factories: dict) -> bytes:
    """Run one task; its answer's bytes. (A function of its own, so that the views of the slabs it made --
    inputs, stacked results -- are gone when it returns.)"""
    task_id, position, block, unpack, slab_name, seeds, iteration, stack = _read_task(message, slabs)
    key = (seeds, iteration)
    if key not in factories:
        factories.clear()
        factories[key] = rng_factory(seeds, iteration)
    t0 = time.perf_counter()
    results, failed = apply_block(fn, block, unpack, label, position, factories[key])
    elements = results  # as the function made them: what to send one by one if the block cannot cross
    tag = None
    writer = SlabWriter(_attached(slab_name, slabs))
    if stack and not failed and results and not _has_0d_array(results[0]):
        try:  # like arrays are stacked straight into the slab (``writer.alloc``)
            results, tag = [stack_fast(results, f"batch ({label})", writer.alloc)], STACKED
        except Exception:  # noqa: BLE001 - ragged elements travel one by one
            pass
    per_element = (time.perf_counter() - t0) / max(1, len(block))
    used = 0
    if failed:
        results = [Failure(_portable(r.error)) if type(r) is Failure else r for r in results]
    else:
        results, used = _to_slab(results, writer)
    try:
        return pickle.dumps((task_id, per_element, slab_name, used, tag, results), protocol=5)
    except Exception:  # noqa: BLE001 - an element that cannot cross (an object array of locks...)
        results = _picklable(elements, label, position)
        return pickle.dumps((task_id, per_element, slab_name, 0, None, results), protocol=5)


def _picklable(results: list, label: str, position: int) -> list:
    """``results`` checked one by one, each that cannot be pickled replaced by a ``Failure`` naming the
    element: the consumer raises it in its place, where an unpicklable answer would kill this worker."""
    out = []
    for i, r in enumerate(results):
        if type(r) is Failure:
            out.append(Failure(_portable(r.error)))
            continue
        try:
            pickle.dumps(r, protocol=5)
            out.append(r)
        except Exception as e:  # noqa: BLE001
            error = TypeError(f"result of {label} at input element {position + i} cannot be sent from the "
                              f"worker process: {type(e).__name__}: {e}")
            out.append(Failure(error))
    return out


def _has_0d_array(result) -> bool:
    """Whether ``result`` has a 0-d array leaf. Such results travel as they are: a row of a stacked block is a
    numpy scalar, and AUTOTUNE moving a map to processes turned the function's 0-d arrays (structured ones:
    ``np.void``) into scalars where threads kept them arrays. (The block's first result is asked: a block
    stacks only like results, and a function that mixes 0-d arrays and scalars for one leaf is not checked
    element by element, which would cost ~1 us a nested result.)"""
    leaves = structure.flatten(result) if structure.is_nested(result) else (result,)
    return any(type(leaf) is np.ndarray and leaf.ndim == 0 for leaf in leaves)


MAX_ATTACHED = 16  # slabs a worker keeps mapped (``_attached``)


def _attached(slab_name, slabs: dict):
    """The buffer of the consumer's slab ``slab_name`` (attached once, kept while used), or None (none
    lent). The consumer makes new slabs while the user holds results that view old ones (``hand_out``) and
    unlinks those it drops; a worker keeps the ``MAX_ATTACHED`` it used last mapped, the others are unmapped
    (their memory is freed once nobody maps them)."""
    if slab_name is None:
        return None
    slab = slabs.pop(slab_name, None)
    if slab is None:
        slab = attach(slab_name)
        while len(slabs) >= MAX_ATTACHED:
            _detach(slabs.pop(next(iter(slabs))))
    slabs[slab_name] = slab  # (last used last)
    return slab.buf


def _forget(names, slabs: dict) -> None:
    """Unmap the slabs the consumer unlinked: their memory is freed only once no process maps them."""
    for name in names:
        slab = slabs.pop(name, None)
        if slab is not None:
            _detach(slab)


def _detach(slab) -> None:
    try:
        slab.close()
    except BufferError:  # the function kept a view of a slab (an input it stored): the exit unmaps it
        _KEPT.append(slab)  # (no __del__ to fail again: a worker process ends with os._exit)


def _read_task(message: bytes, slabs: dict):
    """A task from its message: its block's stacked input columns view the input slab (``inbox``)."""
    task_id, position, block, unpack, slab_name, inbox, seeds, iteration, stack = pickle.loads(message)
    block = unpack_block(block, _attached(inbox, slabs))
    return task_id, position, block, unpack, slab_name, seeds, iteration, stack


def _to_slab(results: list, writer: SlabWriter):
    """Move big array leaves into the slab (those already stacked there are referred to); returns (results,
    bytes used) or (results, -bytes needed)."""
    flat = [structure.flatten(r) for r in results]
    if not any(has_big_leaf(leaves) for leaves in flat):
        return results, 0
    out = []
    for r, leaves in zip(results, flat):
        packed, end = writer.pack(leaves)
        if packed is None:  # no room: everything travels pickled; tell the consumer the size needed
            needed = end + sum(_size(x) for rest in flat[len(out) + 1:] for x in rest)
            return results, -max(needed, 1)
        out.append(structure.pack_as(r, packed) if structure.is_nested(r) else packed[0])
    return out, writer.offset


def _size(x) -> int:
    return getattr(x, "nbytes", 0) + 64


def _portable(error: BaseException) -> BaseException:
    """``error`` if it survives pickling, else a RuntimeError with its type name and traceback text. The text
    -- a note on the error -- keeps the frames of the user's code only: jaxfeed's own frames in a worker say
    how the worker got there (a generator's first pull or its replay after a restore), which would make one
    error's text differ by the path taken, and are not the user's to read."""
    text = _user_traceback(error)
    try:
        error.__traceback__ = None
        pickle.loads(pickle.dumps(error))
        if hasattr(error, "add_note"):
            error.add_note(f"jaxfeed: worker traceback:\n{text}")
        return error
    except Exception:  # noqa: BLE001 - unpicklable exception types or arguments
        return RuntimeError(f"{type(error).__module__}.{type(error).__qualname__}: {error}\n{text}")


def _user_traceback(error: BaseException) -> str:
    te = traceback.TracebackException(type(error), error, error.__traceback__)
    own, seen = _own_dirs(), set()
    todo = [te]
    while todo:  # the error and the errors chained to it
        t = todo.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        t.stack = traceback.StackSummary.from_list([f for f in t.stack if not f.filename.startswith(own)])
        todo += [c for c in (t.__cause__, t.__context__) if c is not None]
    return "".join(te.format())


_OWN = None


def _own_dirs() -> tuple:
    """The folders of jaxfeed's packages (its frames are left out of a worker's traceback text)."""
    global _OWN
    if _OWN is None:
        import importlib.util
        import os

        dirs = []
        for name in ("jaxfeed", "jaxfeed.pipeline", "jaxfeed.formats", "jaxfeed.distribute", "jaxfeed.determinism"):
            spec = importlib.util.find_spec(name)
            dirs += list(spec.submodule_search_locations or []) if spec is not None else []
        _OWN = tuple(os.path.join(d, "") for d in dirs)
    return _OWN

