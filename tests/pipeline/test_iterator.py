"""The iterator a Dataset gives: get_next, close, garbage collection, resume from a state."""

import pickle

import numpy as np
import pytest

from jaxfeed.pipeline import Dataset, errors
from jaxfeed.pipeline.testing import assert_resumes_everywhere


def test_closing_an_iterator_stops_its_threads():
    import threading
    import time

    def stage_threads():  # (the process's one thread starter, engine/thread_start.py, lives on by design)
        return {t for t in threading.enumerate() if t.name != "jaxfeed-thread-starter"}

    before = stage_threads()
    it = iter(Dataset.range(10**6).map(lambda x: x, num_parallel_calls=2).prefetch(10))
    next(it)
    it.close()
    deadline = time.monotonic() + 30  # a hang guard: closed stages' threads end soon after close
    while stage_threads() - before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not stage_threads() - before


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


# ------------------------------------------------------------------ an error met past a next_many's elements
def _bad_at_3(x):
    if x == 3:
        raise ValueError("bad 3")
    return x


@pytest.mark.parametrize("statistics", [False, True])
def test_an_error_next_many_left_for_the_next_call_is_in_the_saved_state(statistics):
    # next_many returns the elements before an error and keeps the error for the next call; a state saved in
    # between used to drop it: the restored run went on after the failing element as if it were not there
    from jaxfeed.pipeline import Options, checkpoint

    options = Options()
    options.experimental_statistics = statistics
    ds = Dataset.range(10).map(_bad_at_3).batch(1).with_options(options)
    it = iter(ds)
    assert [b.tolist() for b in it.next_many(5)] == [[0], [1], [2]]
    state = checkpoint.deserialize(checkpoint.serialize(it.get_state()))
    for resumed in (it, iter(ds)):
        if resumed is not it:
            resumed.set_state(state)
        with pytest.raises(ValueError, match="bad 3"):
            next(resumed)
        assert [b.tolist() for b in resumed] == [[4], [5], [6], [7], [8], [9]]


def test_a_prefetch_keeps_an_error_its_input_left_for_the_next_call_in_its_buffer(monkeypatch):
    # a prefetch reads blocks of its input (its producer, or the consumer's thread when it serves on demand);
    # a block that ends at a failing element leaves the error in the input until the next read, and a state
    # saved in between used to drop it
    from jaxfeed.pipeline.engine import overlap

    monkeypatch.setattr(overlap, "TO_DEMAND", float("inf"))  # on demand after one window, for good
    monkeypatch.setattr(overlap, "TO_THREAD", float("inf"))

    def bad_at_150(x):
        if x == 150:
            raise ValueError("bad 150")
        return x

    ds = Dataset.range(200).map(bad_at_150).batch(1).prefetch(8)
    it = iter(ds)
    assert [next(it).tolist() for _ in range(140)] == [[x] for x in range(140)]
    assert it.root_iterator.executor_decision.startswith("on demand")
    assert [b.tolist() for b in it.next_many(20)] == [[x] for x in range(140, 150)]  # one read of 20 past 150
    state = it.get_state()
    rest = iter(ds)
    rest.set_state(state)
    with pytest.raises(ValueError, match="bad 150"):
        next(rest)
    assert next(rest).tolist() == [151]


def test_a_state_whose_deferred_error_is_not_a_saved_error_is_refused():
    it = iter(Dataset.range(10).map(_bad_at_3).batch(1))
    it.next_many(5)
    state = it.get_state()
    state["deferred"] = "bad 3"
    with pytest.raises(errors.InvalidArgumentError, match="deferred"):
        iter(Dataset.range(10).map(_bad_at_3).batch(1)).set_state(state)


def test_the_root_stages_own_saved_error_is_kept_when_the_state_has_no_top_level_one():
    # batch saves the error it kept for its next call in its own state; a state without the top-level copy
    # (written by hand, or by a version that did not keep one) used to have it cleared on restore
    it = iter(Dataset.range(10).map(_bad_at_3).batch(1))
    it.next_many(5)
    state = it.get_state()
    assert state["root"]["deferred"] is not None
    del state["deferred"]
    resumed = iter(Dataset.range(10).map(_bad_at_3).batch(1))
    resumed.set_state(state)
    with pytest.raises(ValueError, match="bad 3"):
        next(resumed)
    assert next(resumed).tolist() == [4]
