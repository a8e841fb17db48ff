"""The iterator a Dataset gives: get_next, close, garbage collection, resume from a state."""

import pickle

import numpy as np
import pytest

from jaxfeed.pipeline import Dataset, errors
from jaxfeed.pipeline.testing import assert_resumes_everywhere


def test_closing_an_iterator_stops_its_threads():
    import threading

    before = threading.active_count()
    it = iter(Dataset.range(10**6).map(lambda x: x, num_parallel_calls=2).prefetch(10))
    next(it)
    it.close()
    import time

    deadline = time.time() + 5
    while threading.active_count() > before and time.time() < deadline:
        time.sleep(0.01)
    assert threading.active_count() <= before


# --------------------------------------------------------------------------------------- iterators
def test_get_next_and_optional():
    it = iter(Dataset.range(1))
    assert it.get_next_as_optional().get_value() == 0
    assert not it.get_next_as_optional().has_value()
    with pytest.raises(errors.OutOfRangeError):
        it.get_next()
    with pytest.raises(StopIteration):
        next(it)


# ------------------------------------------------------------------------------------------- resume
@pytest.mark.parametrize("make", [
    lambda: Dataset.range(7).map(lambda x: x * 3).batch(2),
    lambda: Dataset.range(12).shuffle(4, seed=2).repeat(2).batch(5),
    lambda: Dataset.from_tensor_slices(np.arange(20.0)).shard(3, 1).skip(1).take(4),
    lambda: Dataset.range(30).map(lambda x: x + 1, num_parallel_calls=3).prefetch(4).batch(4),
    lambda: Dataset.range(10).map(lambda x: x).shuffle(3, seed=9),
    lambda: Dataset.range(25).batch(3, num_parallel_calls=2),
])
def test_resume_at_every_position(make):
    assert_resumes_everywhere(make)


def test_state_from_another_pipeline_is_refused():
    state = iter(Dataset.range(5)).get_state()
    with pytest.raises(errors.FailedPreconditionError, match="different pipeline"):
        Dataset.range(6).make_iterator(state=state)
    with pytest.raises(errors.InvalidArgumentError):
        Dataset.range(5).make_iterator(state={"nope": 1})
    assert pickle.loads(pickle.dumps(state)) == state


def test_garbage_collected_iterator_stops_its_threads():
    import gc
    import threading
    import time

    before = threading.active_count()
    it = iter(Dataset.range(10**6).map(lambda x: x, num_parallel_calls=2).prefetch(10))
    next(it)
    del it
    gc.collect()
    deadline = time.time() + 5
    while threading.active_count() > before and time.time() < deadline:
        time.sleep(0.01)
    assert threading.active_count() <= before
