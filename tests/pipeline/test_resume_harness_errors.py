"""The error-aware resume harness (``testing.assert_resumes_everywhere_with_errors``) checks what it says: errors
are outcomes in their place, a state that drops an error in flight fails it, and a stage that refuses to save
fails it naming where. A harness that cannot fail would prove nothing."""

import pytest

from jaxfeed.pipeline import Dataset, checkpoint
from jaxfeed.pipeline.engine.blocks import Failure
from jaxfeed.pipeline.iterators.parallel_map import ParallelMapIterator
from jaxfeed.pipeline.testing import assert_resumes_everywhere_with_errors


class _Scripted:
    """A stand-in for a Dataset whose iterator plays a script of values and errors; its state is the position.
    ``drops_error``: ``get_state`` saved just before an error skips it (the bug class the harness is for)."""

    script = [1, 2, ValueError("bad 3"), 4, ValueError("bad 5"), 6]

    def __init__(self, drops_error=False):
        self.drops_error = drops_error

    def __iter__(self):
        return self.make_iterator()

    def make_iterator(self, state=None):
        return _ScriptedIterator(self, 0 if state is None else state["pos"])


class _ScriptedIterator:
    def __init__(self, dataset, pos):
        self.dataset, self.pos = dataset, pos

    def __iter__(self):
        return self

    def __next__(self):
        if self.pos >= len(self.dataset.script):
            raise StopIteration
        item = self.dataset.script[self.pos]
        self.pos += 1
        if isinstance(item, Exception):
            raise type(item)(str(item))
        return item

    def get_state(self):
        pos = self.pos
        if self.dataset.drops_error and pos < len(self.dataset.script) and \
                isinstance(self.dataset.script[pos], Exception):
            pos += 1
        return {"pos": pos}

    def close(self):
        pass


def test_errors_are_outcomes_in_their_place():
    outcomes = assert_resumes_everywhere_with_errors(_Scripted)
    assert [o[0] for o in outcomes] == ["element", "element", "error", "element", "error", "element"]
    assert outcomes[2][1:3] == ("ValueError", "bad 3")


def test_a_state_that_drops_the_next_error_fails_the_harness():
    with pytest.raises(AssertionError, match=r"resumed after 2 outcomes: outcome 2 differs"):
        assert_resumes_everywhere_with_errors(lambda: _Scripted(drops_error=True))


def test_a_real_stage_that_drops_a_buffered_error_fails_the_harness(monkeypatch):
    real = ParallelMapIterator.get_state

    def dropping(self):
        state = real(self)
        state["ready"] = [r for r in state["ready"] if type(r) is not Failure]
        return state

    monkeypatch.setattr(ParallelMapIterator, "get_state", dropping)

    def boom(x):
        if int(x) in (3, 7):
            raise ValueError(f"bad {int(x)}")
        return x

    with pytest.raises(AssertionError, match="outcome .* differs|outcomes, expected"):
        assert_resumes_everywhere_with_errors(lambda: Dataset.range(10).map(boom, num_parallel_calls=2))


def test_a_stage_that_refuses_to_save_fails_the_harness_naming_where(monkeypatch):
    monkeypatch.setattr(checkpoint, "serialize", lambda state: (_ for _ in ()).throw(RuntimeError("no")))
    with pytest.raises(AssertionError, match="resumed after 0 outcomes: saving refused: RuntimeError: no"):
        assert_resumes_everywhere_with_errors(lambda: Dataset.range(3))


def test_an_endless_pipeline_is_refused():
    with pytest.raises(AssertionError, match="more than 50 outcomes"):
        assert_resumes_everywhere_with_errors(lambda: Dataset.range(3).repeat(), max_outcomes=50)
