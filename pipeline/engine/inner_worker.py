"""The main loop of an inner-dataset worker process (``engine/remote_inner.py``): it holds the inner iterators
of interleave slots that run here, and answers one request at a time over its pipe.

Requests are answered in the order they came. They are pickled tuples ``(id, op, key, *args)``, ``key`` naming
a slot's inner iterator; each answer goes back after its request's ``id`` (``remote_inner.RID``), by which the
consumer matches it:

- ``("open", key, payload, cwd, environ)``: ``payload`` is the cloudpickled ``(dataset node, Options,
  iteration)``; the iterator is built here as the consumer's context would build it. Everything done for the
  slot from then on runs in the consumer's working directory and environment as they were at the open
  (``_enter``): the workers outlive iterators, and a generator opening a relative path after the user's
  ``os.chdir`` (a notebook's ``%cd``) read the file of the directory the workers started in;
- ``("set_state", key, state)``: a restore;
- ``("read", key, size, stacked)``: one read, ``interleave.read_block`` -- ``(items, ended)`` exactly as a
  read in the consumer's process would give it (failures in place) -- and the iterator's state before it
  (``before``). The consumer asks reads ahead, so a read may come after the end (``([], True)`` again) or
  after the slot was closed (the same). While no request waits, the worker reads ahead -- up to ``AHEAD``
  reads per slot (``_next_to_read``), sized as its last read, while what it holds read ahead, pickled as it
  will be sent, stays under ``AHEAD_BYTES`` for all its slots together -- and answers a slot's reads from
  those in order;
- ``("state", key)``: the iterator's state before the oldest read made ahead, or now. The consumer saves a
  slot as of its oldest read not taken yet -- this, or the ``before`` of the oldest read it asked -- so a
  saved slot holds what the thread way's would (its buffer and a state), not the reads made ahead: a
  restore reads them again (a generator: replays them);
- ``("close", key)``; ``None`` ends the loop (so does the consumer's end of the pipe closing: a worker never
  outlives its consumer for long).

Answers are ``("ok", value)`` or ``("error", exception)``; exceptions travel with their type
(``worker._portable``). An answer that cannot be pickled (an element holding a lock) becomes an error naming
the slot, in the consumer, instead of killing this worker.
"""

from __future__ import annotations

import collections
import os
import pickle
import struct
import tempfile

from ..iterators.interleave import Rows, read_block
from .blocks import Failure
from .context import IteratorContext
from .processes import fresh_random_state, ignore_interrupts, outlive_no_consumer, take_environment
from .worker import _portable

RID = struct.Struct("<q")  # a request's id, which goes back before its answer (``remote_inner`` matches by it)
AHEAD = 16  # reads a worker makes ahead per slot while no request waits (a read is at most ~256 KiB:
# ``interleave.READ_BYTES``). A slot's reads are uneven -- a generator reading a Parquet row group at a time:
# one read in eight took 7-12 ms, the others ~0.3 -- and the slots of an interleave cross such steps together,
# so the consumer, which takes every slot in turn, waited on them unless the worker was a whole row group
# ahead on each: P6 as ported with 8 reads ahead 1.10M rows/s, with 16 1.30M (one run each, same machine)
AHEAD_BYTES = 8 << 20  # ...and bytes it holds read ahead, all its slots together (answers pickled ahead, so
# their size is known). Counting reads alone let a generator of large elements be read to its end: the
# first reads are asked before the consumer knows how large elements are (``interleave.FIRST_READ``), and
# the worker read ahead at that size -- 2 MiB arrays, 100 to a file: whole files, ~200 MiB a slot, one batch
# into an epoch. P6's reads are ~0.1 MiB: its ~5 MiB a worker of read-ahead stays under it


def main(conn, consumer: int, busy) -> None:
    """Answer ``conn``'s requests until the stop. ``busy`` (a shared int) holds the key of the slot this worker
    reads for while it does, else -1: the consumer stops a worker stuck there for a slot it closed
    (``InnerWorkers.wait``)."""
    import cloudpickle

    ignore_interrupts()
    outlive_no_consumer(consumer)
    fresh_random_state()
    inners: dict = {}
    ahead: dict = {}  # key -> reads made ahead, oldest first: ``(answer pickled, ended, before)``
    held = 0  # bytes of the pickled answers in ``ahead``
    reading: dict = {}  # key -> (size, stacked) of its last read: the slots to read ahead, until they end
    unsaved: dict = {}  # id(iterator) -> what saving it raised (``_saved``)
    places: dict = {}  # key -> (cwd, environ) of the consumer at the slot's open
    while True:
        if reading and held < AHEAD_BYTES and not conn.poll(0):  # nothing asked: read ahead for the slot
            key = _next_to_read(reading, ahead)  # with the fewest reads made
            if len(ahead[key]) < AHEAD:
                _enter(places, key)
                got = _read(inners, unsaved, key, *reading[key], busy)
                data = _pickled("read", ("ok", got))
                ahead[key].append((data, got[1], got[2]))
                held += len(data)
                if got[1]:
                    del reading[key]
                continue
        try:
            message = conn.recv_bytes()
        except (EOFError, OSError):
            break
        request = pickle.loads(message)
        if request is None:
            break
        rid, op, key = request[0], request[1], request[2]
        data = None
        try:
            if op == "open":
                places[key] = (request[4], request[5])
            _enter(places, key)
            if op == "read":
                made = ahead.get(key)
                if made:
                    data, ended, _ = made.popleft()
                    held -= len(data)
                else:
                    got = _read(inners, unsaved, key, request[3], request[4], busy)
                    ended, answer = got[1], ("ok", got)
                if not ended and key in inners and not (made and made[-1][1]):  # it goes on: read ahead
                    ahead.setdefault(key, collections.deque())
                    reading[key] = (request[3], request[4])
            elif op == "open":
                node, options, iteration = cloudpickle.loads(request[3])
                inners[key] = IteratorContext(options, iteration).build(node)
                answer = ("ok", None)
            elif op == "set_state":
                held -= _forget(key, ahead, reading)
                inners[key].set_state(request[3])
                answer = ("ok", None)
            elif op == "state":  # as it was before the oldest read made ahead (the consumer has not had it)
                made = ahead.get(key)
                answer = ("ok", made[0][2] if made else _saved(inners[key], unsaved))
            elif op == "close":
                held -= _forget(key, ahead, reading)
                places.pop(key, None)
                it = inners.pop(key, None)
                if it is not None:
                    unsaved.pop(id(it), None)
                    it.close()
                answer = ("ok", None)
            else:
                answer = ("error", ValueError(f"inner worker: unknown request {op!r}"))
        except BaseException as e:  # noqa: BLE001 - the consumer raises it in the slot's place
            data, answer = None, ("error", _portable(e))
        try:
            conn.send_bytes(RID.pack(rid) + (data if data is not None else _pickled(op, answer)))
        except (EOFError, OSError):
            break
    for it in inners.values():
        try:
            it.close()
        except Exception:  # noqa: BLE001 - leaving anyway
            pass


_here = None  # the (cwd, environ) this process is in, as last entered


def _enter(places: dict, key) -> None:
    """Be in the working directory and environment of ``key``'s consumer at its open (a no-op when already:
    the slots of one consumer share them; an equal place is kept by identity after the first comparison)."""
    global _here
    place = places.get(key)
    if place is None or place is _here:
        return
    if place == _here:
        places[key] = _here
        return
    cwd, environ = place
    try:
        os.chdir(cwd)
    except OSError:  # the directory is gone since: relative paths find nothing, as in the consumer, whose
        _enter_a_removed_directory()  # working directory it still is (never the worker's last one instead)
    take_environment(environ)
    _here = place


def _enter_a_removed_directory() -> None:
    """Be where the consumer is when its working directory was removed: in a directory that is gone (nothing is
    found or written there by a relative path). Made and removed at once, so nothing is left in the temp dir."""
    nowhere = tempfile.mkdtemp(prefix="jaxfeed-gone-")
    os.chdir(nowhere)
    os.rmdir(nowhere)


def _forget(key, ahead: dict, reading: dict) -> int:
    """Drop a slot's reads made ahead (a restore, a close) and stop reading ahead for it: the bytes let go."""
    reading.pop(key, None)
    return sum(len(made[0]) for made in ahead.pop(key, ()))


def _pickled(op: str, answer) -> bytes:
    """``answer`` as sent. One that cannot be pickled (an element holding a lock) becomes an error naming the
    slot -- a read's in its place, as a failure -- instead of killing this worker."""
    try:
        return pickle.dumps(answer, protocol=5)
    except Exception as e:  # noqa: BLE001 - a value that cannot cross processes
        if op == "read":
            return pickle.dumps(("ok", ([Failure(TypeError(
                f"an element of an interleave slot cannot be sent from the worker process: "
                f"{type(e).__name__}: {e}"))], False, answer[1][2])), protocol=5)
        return pickle.dumps(("error", TypeError(
            f"the answer to {op} cannot be sent from the worker process: {type(e).__name__}: {e}")), protocol=5)


def _read(inners, unsaved, key, size, stacked, busy):
    """One read as ``Slot.read`` gives it, with the iterator's state before it: ``(items, ended, before)``; a
    read's error in place as a failure (the iterator stays, as the slot's does). A read past the end -- asked
    ahead before the end was known -- ends. ``busy`` holds ``key`` meanwhile (``main``)."""
    it = inners.get(key)
    if it is None:
        return [], True, None
    before = _saved(it, unsaved)
    busy.value = key
    try:
        items, ended = read_block(it, size, stacked)
    except BaseException as e:  # noqa: BLE001 - in place, as ``Slot.read`` delivers a read's error
        return [Failure(_portable(e))], False, before
    finally:
        busy.value = -1
    if type(items) is not Rows:
        items = [Failure(_portable(x.error)) if type(x) is Failure else x for x in items]
    return items, ended, before


def _saved(it, unsaved: dict) -> tuple:
    """``("state", the iterator's state)`` now, or ``("error", what saving it raises)`` (a generator not
    declared replayable): raised in the consumer only if it saves the slot at that point. An iterator that
    could not be saved once is not asked again (``unsaved``, by iterator): whether a generator can be saved
    is its declaration's and the options', and building the error per read cost ~0.1 us a row of P6."""
    error = unsaved.get(id(it))
    if error is not None:
        return error
    try:
        return "state", it.get_state()
    except Exception as e:  # noqa: BLE001 - the consumer's get_state raises it
        unsaved[id(it)] = error = ("error", _portable(e))
        return error


def _next_to_read(reading: dict, ahead: dict):
    """The slot to read ahead for: the first opened with fewer than ``AHEAD // 2`` reads made ahead (slots open
    in the order the consumer reaches them: the current ones before the next ones, which would otherwise take
    the worker whenever they had fewer made -- P6's consumer then waited 10-20 ms on a current slot while its
    worker opened the next files), else the one with the fewest."""
    for key in reading:  # (dicts keep insertion order: keys were added as slots were first read)
        if len(ahead[key]) < AHEAD // 2:
            return key
    return min(reading, key=lambda k: len(ahead[k]))
