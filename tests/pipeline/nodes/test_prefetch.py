"""prefetch (docs/tf-behaviour.md)."""

import time

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


def test_prefetch_fills_its_buffer_while_the_consumer_works_on_the_first_element():
    # tf.data's prefetch runs ahead from the start: while a training loop's first step runs (compiling, often
    # seconds), the next elements are made. The first element is served on the consumer (time to first
    # batch); the producer must start then, not at the second call.
    made = []

    def make(x):
        made.append(x)
        return x

    ds = Dataset.range(100).map(make).prefetch(8)
    it = iter(ds)
    assert int(next(it)) == 0
    first = len(made)
    deadline = time.monotonic() + 30  # the consumer "works" until the producer has filled the buffer
    while len(made) < first + 8 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert len(made) >= first + 8, f"nothing made while the consumer worked ({len(made)} of {first + 8})"
    assert [int(x) for x in it] == list(range(1, 100))
    it.close()
