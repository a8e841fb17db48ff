"""Ctrl-C during an iterator's step: raised as soon as the step is over.

A KeyboardInterrupt can land between any two bytecodes of the thread that called ``next``. Landing in the
engine's bookkeeping it left the iterator unable to go on: a slot marked as being read and never read (a
later ``get_state`` waited for it forever), a read's answer taken and never stored, elements a batch had
gathered before it waited for the rest (gone from the stream). A script that catches Ctrl-C to save a
checkpoint then hung, or saved a position its data did not match. No line of a step is safe for an
exception from anywhere: not even its waits (a batch waits with elements in hand). So, with Python's
default SIGINT handler in place:

- Ctrl-C outside a step (the training step, the user's own code): raised at once, as before.
- Ctrl-C during a step (the engine's work or waits, or a user function it runs on this thread): raised as
  soon as the step returns -- at the caller's next line or the next Python call, whichever comes first. The
  step's element is delivered (``x = next(it)`` completes) and the iterator's state is the one after it;
  ``get_state`` in the ``except KeyboardInterrupt`` saves a position that resumes exactly.
- A step still running ``HINT_SECONDS`` after the Ctrl-C prints why nothing happened yet (seen at its next
  Python call: a step blocked inside C code the whole time says nothing).
- A second Ctrl-C before the first was raised: raised at once, wherever it lands (a step stuck in a user's
  generator must stay interruptible); the iterator may not go on after that one.

A step is a call of one of the iterator methods registered with ``step`` (the outermost one, when a user
function iterates another pipeline). The raise after the step uses Python's trace hooks on this thread for
the rest of the step only; where another tracer is set (a debugger, coverage), Ctrl-C is raised at once as
before, rather than take the tracer's place. A SIGINT handler the user installed is left alone."""

from __future__ import annotations

import signal
import sys
import threading
import time

_step_codes: set = set()  # code objects of the iterator methods that are steps
HINT_SECONDS = 1.0
HINT = ("jaxfeed: Ctrl-C is raised when the iterator's step returns (a step cut short would lose its "
        "elements). Press Ctrl-C again to interrupt it now.")

_pending = False  # a Ctrl-C waits for its step's end
_step_over = False  # ... which came: raise at the next line of the caller or the next call
_top = _caller = None  # the step's outermost frame and its caller, while a Ctrl-C is pending
_hint_at = None  # when to print ``HINT`` if the step still runs (time.monotonic)


def step(*functions) -> None:
    """Register iterator methods as steps (their calls' Ctrl-C is deferred as the module doc says)."""
    for fn in functions:
        _step_codes.add(fn.__code__)


def install() -> None:
    """Put ``_on_interrupt`` in Python's default handler's place (main thread only; once)."""
    if threading.current_thread() is not threading.main_thread():
        return
    try:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _on_interrupt)
    except (ValueError, OSError):  # (an interpreter without signals)
        pass


def _outermost_step(frame):
    top = None
    while frame is not None:
        if frame.f_code in _step_codes:
            top = frame
        frame = frame.f_back
    return top


def _on_interrupt(signum, frame):
    global _pending, _step_over, _top, _caller, _hint_at
    if _pending:
        _clear()  # the second Ctrl-C: at once
        signal.default_int_handler(signum, frame)
    top = _outermost_step(frame)
    if top is None or sys.gettrace() is not None or top.f_back is None:
        signal.default_int_handler(signum, frame)
    _pending, _step_over, _top, _caller = True, False, top, top.f_back
    top.f_trace = _trace_top
    _caller.f_trace = _trace_caller
    _caller.f_trace_lines = True
    _hint_at = time.monotonic() + HINT_SECONDS
    sys.settrace(_trace_call)


def _hint() -> None:
    """Say why nothing happened yet, once, when the step still runs ``HINT_SECONDS`` after the Ctrl-C. (Checked
    at the step's Python calls -- its waits poll -- not by a timer thread: a thread started from the handler
    could wait forever on a lock of ``threading`` that the interrupted step held.)"""
    global _hint_at
    if _hint_at is not None and time.monotonic() >= _hint_at:
        _hint_at = None
        print(HINT, file=sys.stderr, flush=True)


def _trace_call(frame, event, arg):
    """The thread's trace function while a Ctrl-C is pending: every call after the step's end raises it."""
    if _step_over and frame.f_code.co_name != "__del__":  # (raised in a finalizer it would be lost)
        _raise()
    _hint()
    return None  # (no line events in the step's own calls)


def _trace_top(frame, event, arg):
    global _step_over
    if event == "return":  # (returning or raising: either way the step is over)
        _step_over = True
    return _trace_top


def _trace_caller(frame, event, arg):
    if _step_over and event in ("line", "return"):
        _raise()
    return _trace_caller


def _raise():
    _clear()
    raise KeyboardInterrupt


def _clear() -> None:
    global _pending, _step_over, _top, _caller, _hint_at
    _hint_at = None
    sys.settrace(None)
    for frame in (_top, _caller):
        if frame is not None:
            frame.f_trace = None
    _pending, _step_over, _top, _caller = False, False, None, None
