"""prefetch (docs/tf-behaviour.md)."""

import pytest

from jaxfeed.pipeline import AUTOTUNE, Dataset, errors

from node_test_helpers import values


# ----------------------------------------------------------------------------------------- prefetch
def test_prefetch_keeps_order_and_validates():
    assert values(Dataset.range(100).prefetch(5)) == list(range(100))
    assert values(Dataset.range(100).prefetch(AUTOTUNE).batch(7)) == values(Dataset.range(100).batch(7))
    assert values(Dataset.range(3).prefetch(0)) == [0, 1, 2]
    with pytest.raises(errors.InvalidArgumentError):
        Dataset.range(3).prefetch(-2)


def test_prefetch_delivers_errors_in_place():
    def f(x):
        if x == 3:
            raise RuntimeError("bad element")
        return x

    it = iter(Dataset.range(6).map(f).prefetch(4))
    assert [int(next(it)) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(RuntimeError, match="bad element"):
        next(it)
    assert [int(x) for x in it] == [4, 5]
