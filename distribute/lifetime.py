"""Interpreter exit: stop every distributed iterator's prefetch thread before JAX's runtime goes.

A prefetch thread left running at exit is a daemon thread inside JAX (placing a step on the devices, or
waiting for the other workers in the coordination service). When the interpreter finalizes, such a thread
is killed the moment it next wants the GIL; killing it inside JAX's C++ frames aborts the process
("terminate called after throwing an instance of ''", SIGABRT) -- after the user's program had finished,
or while it was reporting an uncaught exception.

So every iterator that starts a thread registers here, and a hook run by ``threading``'s shutdown (before
any ``atexit`` handler, JAX's included, and before the interpreter starts finalizing) waits for the
program's other non-daemon threads (as the interpreter does next; one may still be iterating) and halts them all:
the threads are stopped and joined, the steps they had placed on the devices go back to host memory.
A thread blocked in its input pipeline (a source that never answers) is waited for ``EXIT_WAIT_S`` at most:
exit never hangs on it.
From then on ``exiting()`` is true and iterators read steps on the caller's thread (an ``atexit`` handler
may still iterate or save state).
"""

from __future__ import annotations

import atexit
import sys
import threading
import time
import weakref

_live: "weakref.WeakSet" = weakref.WeakSet()
_lock = threading.Lock()
_registered = False
_exiting = threading.Event()
EXIT_WAIT_S = 30.0  # how long exit waits, in all, for prefetch threads to stop


class Exiting(RuntimeError):
    """A wait on other workers was cut short because the interpreter is exiting."""


class StepAbandoned(RuntimeError):
    """A producer's wait for the other workers' reports of a step was cut short because its iterator halts
    (``get_state``, ``close``): the step's pieces are kept and the step is made again when it goes on."""


def exiting() -> bool:
    """True once the interpreter has begun to exit: start no more threads, stop waiting on peers."""
    return _exiting.is_set()


def track(iterator) -> None:
    """Halt ``iterator`` (its ``_halt()``: stop and join its thread, keep its state) when Python exits."""
    global _registered
    with _lock:
        _live.add(iterator)
        if not _registered:
            try:
                threading._register_atexit(_halt_all)  # runs before atexit handlers and finalization
            except RuntimeError:
                # threading's shutdown has begun (the main thread returned while this one goes on): the
                # interpreter joins the non-daemon threads next, then runs atexit handlers -- the last
                # moment before finalization, and registered after JAX's, so run before them
                atexit.register(_halt_all)
            _registered = True


def _wait_for_other_threads() -> None:
    """Join the program's other non-daemon threads first, as the interpreter would right after this hook:
    one of them may still be iterating (a training loop on a thread of its own), and halting its iterator
    under it would lose the steps in flight."""
    me = threading.current_thread()
    for t in threading.enumerate():
        if t is not me and not t.daemon and t.is_alive():
            t.join()


def _halt_all() -> None:
    """Stop every live iterator's thread (all at once, then wait for each, EXIT_WAIT_S in all). A thread
    still running at the deadline is waiting on its input pipeline (a source that blocks): exit goes on
    without it -- it is not inside JAX, since placing a step takes no time to speak of -- and stderr says so."""
    _wait_for_other_threads()
    _exiting.set()
    with _lock:
        iterators = list(_live)
    for it in iterators:
        stop = getattr(it, "_stop", None)
        if stop is not None:
            stop.set()
    deadline = time.monotonic() + EXIT_WAIT_S
    for it in iterators:
        thread = getattr(it, "_thread", None)
        if thread is not None:
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                print(f"jaxfeed: a distributed iterator's prefetch thread did not stop within {EXIT_WAIT_S:g}s at "
                      "exit (its input pipeline is still producing a step); exiting without it", file=sys.stderr)
                continue
        try:
            it._halt()
        except BaseException:  # noqa: BLE001 - exit goes on; one iterator's failure must not keep others running
            pass
