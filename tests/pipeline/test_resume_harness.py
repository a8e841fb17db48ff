"""The shared resume harness (``jaxfeed.pipeline.testing.assert_resumes_everywhere``) checks what it says:
states go through the checkpoint format, saving disturbs nothing, an exhausted iterator resumes exhausted,
and a state's layout (``pipeline/state_layout.py``) is the same at every step."""

import numpy as np
import pytest

from jaxfeed.pipeline import Dataset, checkpoint, state_layout
from jaxfeed.pipeline.engine.blocks import Failure
from jaxfeed.pipeline.iterators.random_access import RandomAccessIterator
from jaxfeed.pipeline.testing import assert_resumes_everywhere


def make():
    return Dataset.range(5).map(lambda x: x * 3)


# ---------------------------------------------------------------------- layouts
def unify(a, b):
    return state_layout.unify(state_layout.layout(a), state_layout.layout(b))


def test_a_buffer_may_hold_any_number_of_elements():
    merged, conflict = unify({"buffer": []}, {"buffer": [np.int64(1), np.int64(2)]})
    assert conflict is None and merged == ("dict", (("buffer", ("list", ("numpy", "<i8"))),))


def test_none_is_a_field_not_set_yet_and_an_error_may_stand_for_an_element():
    assert unify({"file": None}, {"file": "a.tfrecord"})[1] is None
    assert unify({"ready": [Failure(ValueError("x"))]}, {"ready": [np.int64(1)]})[1] is None


def test_keys_leaf_types_dtypes_ranks_and_positions_are_layout():
    cases = [({"pos": 1}, {"pos": 1, "extra": 2}), ({"pos": 1}, {"pos": "1"}),
             ({"a": np.zeros(2, np.int64)}, {"a": np.zeros(2, np.int32)}),
             ({"a": np.zeros(2)}, {"a": np.zeros((2, 2))}), ({"buffer": []}, {"buffer": np.zeros(2, np.int64)}),
             ({"inputs": [{"pos": 1}, {"file": "f"}]}, {"inputs": [{"pos": 1}, {"file": "f"}, {"x": 1}]})]
    for a, b in cases:
        _, conflict = unify(a, b)
        assert conflict is not None, (a, b)


def test_a_conflict_names_where_it_is():
    _, conflict = unify({"root": {"input": {"pos": 1}}}, {"root": {"input": {"pos": 1.5}}})
    assert conflict.path == "state['root']['input']['pos']"
    assert conflict.under("input") and not conflict.under("buffer")


# ---------------------------------------------------------------------- the harness
def test_the_harness_saves_through_the_checkpoint_format(monkeypatch):
    calls = []
    real = checkpoint.serialize
    monkeypatch.setattr(checkpoint, "serialize", lambda state: calls.append(1) or real(state))
    assert len(assert_resumes_everywhere(make)) == 5
    assert len(calls) == 5 + 2  # k = 0..5 and the exhausted iterator


def test_the_harness_refuses_a_state_whose_layout_changes(monkeypatch):
    real = RandomAccessIterator.get_state
    monkeypatch.setattr(RandomAccessIterator, "get_state",
                        lambda self: dict(real(self), started=True) if self._pos else real(self))
    with pytest.raises(AssertionError, match=r"another layout .*state\['root'\]\['input'\]"):
        assert_resumes_everywhere(make)


def test_the_harness_refuses_a_save_that_disturbs_the_saved_iterator(monkeypatch):
    real = RandomAccessIterator.get_state

    def skipping(self):
        state = real(self)
        self._pos = min(self._pos + 1, self._n)  # saving "loses" the next element of the saved iterator
        return state

    monkeypatch.setattr(RandomAccessIterator, "get_state", skipping)
    with pytest.raises(AssertionError, match="the saved iterator read on"):
        assert_resumes_everywhere(make)


def test_the_harness_resumes_an_exhausted_iterator_exhausted():
    assert_resumes_everywhere(make, ks=["exhausted"])


def test_known_layout_changes_are_listed_with_a_reason():
    for node_test, conflict_test, why in state_layout.known_varying():
        assert callable(node_test) and callable(conflict_test) and len(why) > 20
