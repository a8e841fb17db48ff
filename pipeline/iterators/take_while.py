"""``take_while``: ``filter``'s block machinery, cut at the first False."""

from __future__ import annotations

from .blocks import Failure
from .filter import PredicateIterator


class TakeWhileIterator(PredicateIterator):
    def _select(self, items, verdict, failed):
        try:
            end = verdict.index(False)  # numpy's False compares equal too; a Failure never does
        except ValueError:
            end = len(verdict)
        else:
            self._stopped = True
        if not failed:
            return items[:end]
        return [v if type(v) is Failure else x for x, v in zip(items[:end], verdict[:end])]
