"""A user function that raises ``StopIteration``: an error at its element, never the end of the input.

A bug: calls made through ``map()`` (the map's and filter's block loops) ended at the first StopIteration, and
the elements after it in the block were silently gone; elsewhere the StopIteration itself reached the user's
``for`` loop, which took it for the end of the dataset. tf.data's map reports a function's OutOfRangeError
(what StopIteration becomes in a ``py_function``) as InvalidArgumentError; so does jaxfeed, caused by the
function's StopIteration."""

import numpy as np
import pytest

from jaxfeed.pipeline import AUTOTUNE, Dataset, errors

BAD = 5


def stops_at_bad(x):
    if int(x) == BAD:
        raise StopIteration("no more")
    return x * 10


def keeps_unless_bad(x):
    if int(x) == BAD:
        raise StopIteration
    return x % 2 == 0


def stateful_sum(state, x):
    if int(x) == BAD:
        raise StopIteration
    return state + x, state + x


def inner_of(x):
    if int(x) == BAD:
        raise StopIteration
    return Dataset.from_tensors(x)


PIPELINES = {
    "map": (lambda ds: ds.map(stops_at_bad), [x * 10 for x in range(12) if x != BAD]),
    "map npc=2": (lambda ds: ds.map(stops_at_bad, num_parallel_calls=2), [x * 10 for x in range(12) if x != BAD]),
    "map AUTOTUNE": (lambda ds: ds.map(stops_at_bad, num_parallel_calls=AUTOTUNE),
                     [x * 10 for x in range(12) if x != BAD]),
    "map process": (lambda ds: ds.map(stops_at_bad, num_parallel_calls=2, executor="process"),
                    [x * 10 for x in range(12) if x != BAD]),
    "map with_rng": (lambda ds: ds.map(lambda x, rng: stops_at_bad(x), with_rng=True, seed=1),
                     [x * 10 for x in range(12) if x != BAD]),
    "map -> batch": (lambda ds: ds.map(stops_at_bad, num_parallel_calls=2).batch(3).unbatch(), None),
    "filter": (lambda ds: ds.filter(keeps_unless_bad), [x for x in range(12) if x % 2 == 0 and x != BAD]),
    "take_while": (lambda ds: ds.take_while(lambda x: stops_at_bad(x) >= 0), [x for x in range(12) if x != BAD]),
    "scan": (lambda ds: ds.scan(np.int64(0), stateful_sum), None),
    "flat_map": (lambda ds: ds.flat_map(inner_of), [x for x in range(12) if x != BAD]),
    "interleave": (lambda ds: ds.interleave(inner_of, cycle_length=1), [x for x in range(12) if x != BAD]),
}


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_stop_iteration_in_a_user_function_is_an_error_at_its_element(name):
    build, _ = PIPELINES[name]
    it = iter(build(Dataset.range(12)))
    before = []
    with pytest.raises(errors.InvalidArgumentError, match="raised StopIteration") as info:
        while True:
            before.append(next(it))
    assert isinstance(info.value.__cause__, StopIteration) or info.value.__cause__ is None
    assert len(before) <= BAD  # (a batch above fails whole)


@pytest.mark.parametrize("name", sorted(name for name, (_, want) in PIPELINES.items() if want is not None))
def test_ignore_errors_skips_only_that_element(name):
    build, want = PIPELINES[name]
    got = [int(x) for x in build(Dataset.range(12)).ignore_errors()]
    if name == "take_while":
        want = [x for x in range(12) if x != BAD]
    assert got == want
