"""Error classes named like ``tf.errors``, each also a subclass of the matching Python built-in.

Ported ``except tf.errors.DataLossError`` clauses keep working after an import change, and Python users
can catch the built-in (``except ValueError``) instead. Plain Python errors (a ``TypeError`` for an argument
of the wrong type) stay plain.

Messages name the transformation, the argument or element, and the file and byte offset where they apply.
"""

from __future__ import annotations


class OpError(Exception):
    """Base of every jaxfeed pipeline error. ``op`` names the transformation, when known."""

    def __init__(self, message: str, op: str | None = None):
        super().__init__(message)
        self.message = message
        self.op = op

    def __str__(self):  # OSError subclasses would print "[Errno None] ..." once `filename` is set
        return self.message


class CancelledError(OpError):
    pass


class UnknownError(OpError, RuntimeError):
    pass


class InvalidArgumentError(OpError, ValueError):
    pass


class DeadlineExceededError(OpError, TimeoutError):
    pass


class NotFoundError(OpError, FileNotFoundError):
    pass


class AlreadyExistsError(OpError, FileExistsError):
    pass


class PermissionDeniedError(OpError, PermissionError):
    pass


class ResourceExhaustedError(OpError, MemoryError):
    pass


class FailedPreconditionError(OpError, RuntimeError):
    pass


class AbortedError(OpError, RuntimeError):
    pass


class OutOfRangeError(OpError, IndexError):
    """Raised by ``get_next()`` past the end; Python iteration raises ``StopIteration`` instead."""


class UnimplementedError(OpError, NotImplementedError):
    pass


class InternalError(OpError, RuntimeError):
    pass


class UnavailableError(OpError, ConnectionError):
    pass


class DataLossError(OpError, IOError):
    pass


class UnauthenticatedError(OpError, PermissionError):
    pass


class WorkerDiedError(UnavailableError):
    """A worker process of a parallel stage died (killed, crashed) before returning its result."""


def add_note(exc: BaseException, note: str) -> BaseException:
    """Attach ``note`` to ``exc`` (shown under the traceback) once, without changing its type."""
    notes = getattr(exc, "__notes__", None) or []
    if note not in notes and hasattr(exc, "add_note"):
        exc.add_note(note)
    return exc


def in_transformation(exc: BaseException, transformation: str, element_index: int | None = None):
    """Annotate an exception raised by a user function with the transformation that called it. A
    ``StopIteration`` becomes an ``InvalidArgumentError`` caused by it (``function_stopped``)."""
    where = f"in user function of {transformation}"
    if element_index is not None:
        where += f" at input element {element_index}"
    if isinstance(exc, StopIteration):
        exc = function_stopped(transformation, element_index, exc)
    return add_note(exc, f"jaxfeed: raised {where}")


def function_stopped(transformation: str, element_index: int | None, stop: StopIteration | None = None):
    """The error for a user function that raised ``StopIteration`` (``stop``, when the caller still has it).
    Raised as it is, it would end the user's loop -- a ``for`` over the dataset stops at it -- and a block of
    calls through ``map()`` ended there too: the elements after it were silently gone. tf.data's map turns a
    function's OutOfRangeError (what ``StopIteration`` in a ``py_function`` becomes) into InvalidArgumentError
    ("Function invocation produced OutOfRangeError"); so does jaxfeed."""
    at = "" if element_index is None else f" at input element {element_index}"
    said = f" ({stop})" if stop is not None and str(stop) else ""
    error = InvalidArgumentError(f"{transformation}: the user function raised StopIteration{said}{at}: an error, "
                                 f"not the end of the input (tf.data: Function invocation produced "
                                 f"OutOfRangeError)", transformation)
    error.__cause__ = stop
    return error
