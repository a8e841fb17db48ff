"""take and skip (docs/tf-behaviour.md)."""

from jaxfeed.pipeline import Dataset
from jaxfeed.pipeline.dataset import INFINITE_CARDINALITY

from node_test_helpers import values


# -------------------------------------------------------------------------------- take, skip, repeat
def test_take_and_skip_counts():
    r = Dataset.range(5)
    assert values(r.take(2)) == [0, 1] and values(r.take(-1)) == list(range(5)) and values(r.take(0)) == []
    assert values(r.take(10)) == list(range(5))
    assert values(r.skip(2)) == [2, 3, 4] and values(r.skip(-1)) == [] and values(r.skip(9)) == []
    assert r.take(-5).cardinality() == 5  # tf.data says -5; we report the truth
    assert r.skip(-1).cardinality() == 0 and r.repeat().skip(-1).cardinality() == INFINITE_CARDINALITY
