"""``take_while``: ``filter``'s block machinery, cut at the first False."""

from __future__ import annotations

import itertools
import operator

from ..engine.blocks import Failure
from .filter import PredicateIterator
from ..engine.registry import builds
from ..nodes.take_while import TakeWhile


@builds(TakeWhile)
class TakeWhileIterator(PredicateIterator):
    def _select(self, items, verdict, failed):
        # the first falsy verdict, in C (a Failure is truthy; list.index would compare numpy bools slowly)
        end = next(itertools.compress(itertools.count(), map(operator.not_, verdict)), None)
        if end is None:
            end = len(verdict)
        else:
            self._stopped = True
        if not failed:
            return items[:end]
        return [v if type(v) is Failure else x for x, v in zip(items[:end], verdict[:end])]
