"""``take_while``: ``filter``'s block machinery, cut at the first False."""

from __future__ import annotations

from .blocks import Failure
from .filter import PredicateIterator


class TakeWhileIterator(PredicateIterator):
    def _select(self, items, verdict):
        try:
            end = verdict.index(False)
        except ValueError:
            end = len(verdict)
        else:
            self._stopped = True
        return [v if type(v) is Failure else x for x, v in zip(items[:end], verdict[:end])]
