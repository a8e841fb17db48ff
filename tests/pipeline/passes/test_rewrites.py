"""Every rewrite pass together: the rewritten graph yields what the plain graph yields."""

from jaxfeed.pipeline import Dataset
from jaxfeed.pipeline.testing import assert_same_after_rewrites


def test_rewrites_yield_what_the_plain_graph_yields():
    ds = Dataset.range(20).map(lambda x: x + 1).map(lambda x: (x, x * 2)).map(lambda a, b: a + b).take(-1).skip(0)
    assert_same_after_rewrites(ds.batch(3))
    text = ds.explain()
    assert "map_fusion" in text and "noop_elimination" in text
