"""repeat (docs/tf-behaviour.md)."""

from jaxfeed.pipeline import Dataset
from jaxfeed.pipeline.dataset import INFINITE_CARDINALITY

from node_test_helpers import values


def test_repeat_counts_and_empty_forever_terminates():
    assert values(Dataset.range(2).repeat(3)) == [0, 1] * 3
    assert values(Dataset.range(2).repeat(0)) == []
    assert values(Dataset.range(0).repeat()) == []
    assert Dataset.range(0).repeat().cardinality() == 0
    assert values(Dataset.range(3).repeat().take(7)) == [0, 1, 2, 0, 1, 2, 0]
    assert Dataset.range(3).repeat().cardinality() == INFINITE_CARDINALITY
    assert values(Dataset.range(3).repeat(2).batch(4)) == [[0, 1, 2, 0], [1, 2]]
