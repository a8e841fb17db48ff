"""Which strategy is current, and whether code runs in cross-replica or replica context (thread-local).

As in tf.distribute: outside any scope the *default strategy* (one replica) applies and
``get_replica_context()`` returns its replica context; inside ``strategy.scope()`` but outside ``run`` the
code is in *cross-replica* context (``get_replica_context()`` is None); inside ``run`` each call of the
function is in *replica* context.
"""

from __future__ import annotations

import threading

_local = threading.local()


def _stack() -> list:
    s = getattr(_local, "stack", None)
    if s is None:
        s = _local.stack = []
    return s


def push(strategy, replica_context=None):
    _stack().append((strategy, replica_context))


def pop():
    _stack().pop()


def current():
    """(strategy, replica context) of the innermost scope/run, or (None, None)."""
    s = _stack()
    return s[-1] if s else (None, None)


def get_strategy():
    """The current strategy: the innermost ``scope()``'s, else the default (one-replica) strategy."""
    strategy, _ = current()
    if strategy is None:
        from .strategy import default_strategy

        return default_strategy()
    return strategy


def has_strategy() -> bool:
    """True inside a non-default strategy's ``scope()`` (or ``run``)."""
    strategy, _ = current()
    return strategy is not None and not getattr(strategy, "_is_default", False)


def in_cross_replica_context() -> bool:
    strategy, ctx = current()
    return strategy is not None and ctx is None


def get_replica_context():
    """The replica context inside ``run``; None in cross-replica context; the default strategy's replica
    context outside any scope."""
    strategy, ctx = current()
    if strategy is None:
        from .strategy import default_strategy

        return default_strategy()._default_replica_context
    return ctx


# The variables trace of the ``run`` being traced in this thread (see variables.py).
def trace():
    return getattr(_local, "trace", None)


def set_trace(t):
    _local.trace = t
