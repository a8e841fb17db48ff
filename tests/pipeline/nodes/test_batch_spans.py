"""A batch of a plain random-access stream (``Range``, ``from_tensor_slices``, ``ParquetDataset``, ...) asks
the stream for its next positions as a span and the node for those rows (``Node.gather_span``): no index
array per batch. Any other index stream (a shuffle, a shard, an iterator wrapped for statistics) still hands
indices. Batches, the end, ``drop_remainder`` and saved states are those of the index way."""

import numpy as np
import pytest

from jaxfeed.pipeline import Dataset, Options
from jaxfeed.pipeline.nodes.base import Node
from jaxfeed.pipeline.testing import assert_resumes_everywhere


@pytest.fixture()
def spans(monkeypatch):
    """The spans nodes are asked for, as (node kind, start, stop)."""
    asked = []
    real = Node.gather_span

    def recording(self, start, stop):
        asked.append((self.kind, start, stop))
        return real(self, start, stop)

    monkeypatch.setattr(Node, "gather_span", recording)
    return asked


def test_a_batch_of_a_range_is_gathered_as_spans(spans):
    batches = list(Dataset.range(10).batch(4))
    assert [b.tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [(start, stop) for _, start, stop in spans] == [(0, 4), (4, 8), (8, 10)]


def test_drop_remainder_drops_the_last_short_span(spans):
    assert [b.tolist() for b in Dataset.from_tensor_slices(np.arange(10)).batch(4, drop_remainder=True)] == \
        [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [(start, stop) for _, start, stop in spans] == [(0, 4), (4, 8)]


def test_parallel_batches_are_gathered_as_spans(spans):
    batches = list(Dataset.range(10).batch(3, num_parallel_calls=2))
    assert [b.tolist() for b in batches] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert sorted((start, stop) for _, start, stop in spans) == [(0, 3), (3, 6), (6, 9), (9, 10)]


def test_a_shuffled_stream_still_hands_indices(spans):
    got = np.concatenate(list(Dataset.range(10).shuffle(10, seed=1).batch(4))).tolist()
    assert sorted(got) == list(range(10)) and got != list(range(10))
    assert spans == []


def test_a_stream_wrapped_for_statistics_still_hands_indices(spans):
    options = Options()
    options.experimental_statistics = True
    it = iter(Dataset.range(10).batch(4).with_options(options))
    assert [b.tolist() for b in it] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert it.stats()["Range"]["elements"] == 10
    assert spans == []


@pytest.mark.parametrize("drop", [False, True])
def test_batches_gathered_as_spans_resume_everywhere(drop):
    assert_resumes_everywhere(lambda: Dataset.range(11).batch(3, drop_remainder=drop))
