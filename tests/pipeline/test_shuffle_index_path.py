"""The vectorised shuffle over indices makes exactly the step-by-step algorithm's choices."""

import numpy as np
from hypothesis import given, settings, strategies as st

from jaxfeed.pipeline import Dataset
from jaxfeed.pipeline.testing import assert_resumes_everywhere


def _values(ds):
    return [np.asarray(x).tolist() for x in ds]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 3000), buffer=st.integers(1, 1500), seed=st.integers(0, 2**31), batch=st.integers(1, 700))
def test_index_shuffle_equals_element_shuffle(n, buffer, seed, batch):
    x = np.arange(n)
    via_indices = _values(Dataset.from_tensor_slices(x).shuffle(buffer, seed=seed).batch(batch))
    via_elements = _values(Dataset.from_tensor_slices(x).map(lambda v: v).shuffle(buffer, seed=seed).batch(batch))
    assert via_indices == via_elements


def test_index_shuffle_over_repeat_epochs_equals_element_shuffle():
    a = _values(Dataset.range(2500).shuffle(300, seed=4).repeat(3).batch(512))
    b = _values(Dataset.range(2500).map(lambda v: v).shuffle(300, seed=4).repeat(3).batch(512))
    assert a == b


def test_index_shuffle_resumes_everywhere_across_chunks():
    assert_resumes_everywhere(lambda: Dataset.range(3000).shuffle(700, seed=1).batch(97))
