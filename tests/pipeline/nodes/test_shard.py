"""shard (docs/tf-behaviour.md)."""

import pytest

from jaxfeed.pipeline import Dataset, errors

from node_test_helpers import values


# -------------------------------------------------------------------------------------------- shard
def test_shard_keeps_every_nth_from_index():
    assert values(Dataset.range(10).shard(3, 1)) == [1, 4, 7]
    assert values(Dataset.range(10).shard(20, 5)) == [5] and values(Dataset.range(10).shard(20, 15)) == []
    assert Dataset.range(10).shard(3, 1).cardinality() == 3
    assert values(Dataset.range(10).shard(2, 0).batch(2)) == [[0, 2], [4, 6], [8]]
    assert values(Dataset.range(10).batch(2).shard(2, 0)) == [[0, 1], [4, 5], [8, 9]]


def test_shard_validates_arguments():
    with pytest.raises(errors.InvalidArgumentError, match="Index must be between 0 and 1"):
        Dataset.range(3).shard(2, 2)
    with pytest.raises(errors.InvalidArgumentError, match="greater than zero"):
        Dataset.range(3).shard(0, 0)


def test_shard_hint_outside_distribution_fails_at_iteration():
    from jaxfeed.pipeline import SHARD_HINT

    ds = Dataset.range(3).shard(SHARD_HINT, SHARD_HINT)
    with pytest.raises(errors.FailedPreconditionError):
        list(ds)
