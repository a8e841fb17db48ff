"""Threads started without the caller waiting for them to run.

``Thread.start()`` returns only once the new thread has run its first steps, which needs the GIL: with other
stages' threads busy, that wait took about a millisecond per thread on a loaded 2-core machine -- on the
first batch's path when a stage starts its threads there. A stage that wants a thread running soon, but has
the consumer's work to do first, hands it to ``start_soon``: one long-lived starter thread per process starts
it, and the caller goes on at once. ``join_started`` is the matching join for a close path: a thread handed
over but not yet started is waited for (it starts, sees its stage closed and ends), never left behind.

The starter is a daemon thread blocked on a queue; at interpreter exit it is simply not run again. A thread
that can no longer be created (the interpreter finalizing) is marked handled and never runs: its stage's
close finds nothing to join. A child made by ``os.fork`` never starts the threads its parent had handed over
(they would run the parent's stages in the child); it gets its own starter when it needs one.
"""

from __future__ import annotations

import os
import queue
import threading
import time

_requests: queue.SimpleQueue = queue.SimpleQueue()
_lock = threading.Lock()
_starter: threading.Thread | None = None

# the event each handed-over thread carries, set once the starter has dealt with it
_HANDLED = "_jaxfeed_handled"


def start_soon(thread: threading.Thread) -> None:
    """Start ``thread`` on the starter thread; returns without waiting for it to run."""
    global _starter
    setattr(thread, _HANDLED, threading.Event())
    with _lock:
        if _starter is None or not _starter.is_alive():
            _starter = threading.Thread(target=_start_requested, name="jaxfeed-thread-starter", daemon=True)
            _starter.start()
    _requests.put(thread)


def join_started(thread: threading.Thread, timeout: float | None = None) -> None:
    """``thread.join(timeout)``, first waiting (within the same timeout) for a ``start_soon`` to start it."""
    deadline = None if timeout is None else time.monotonic() + timeout
    handled = getattr(thread, _HANDLED, None)
    if handled is not None and not handled.wait(timeout):
        return
    if thread.ident is not None:  # started (a thread never started has no ident)
        thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))


def wait_handled(timeout: float | None = None) -> bool:
    """Wait until every thread handed over so far has been started (or refused); False on timeout. For
    callers that count threads (tests): an earlier stage's threads may otherwise start later."""
    with _lock:
        if _starter is None or not _starter.is_alive():
            return True  # nothing handed over in this process (or the starter has not been needed since a fork)
    done = threading.Event()
    _requests.put(done)
    return done.wait(timeout)


def _forget_in_child() -> None:
    """After ``os.fork``: the child has no starter thread, and the threads its parent had handed over are the
    parent's to run (a copy started here would run the parent's stage in the child). They count as handled,
    never started; the child gets a fresh lock and queue."""
    global _requests, _lock, _starter
    old, _requests, _lock, _starter = _requests, queue.SimpleQueue(), threading.Lock(), None
    while True:
        try:
            item = old.get_nowait()
        except queue.Empty:
            break
        (item if type(item) is threading.Event else getattr(item, _HANDLED)).set()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def _start_requested() -> None:
    while True:
        thread = _requests.get()
        if type(thread) is threading.Event:  # ``wait_handled``: every request before it is handled
            thread.set()
            continue
        try:
            thread.start()
        except RuntimeError:  # "can't create new thread at interpreter shutdown": it never runs
            pass
        finally:
            getattr(thread, _HANDLED).set()
