"""A graph's fingerprint is saved in every iterator state and a restore refuses a state whose fingerprint
differs: a refactor that changes the fingerprint of an unchanged graph makes every saved checkpoint
unusable. These values were computed before the node contract (commit 517b772); graphs without user
functions, so they do not depend on the Python version's bytecode."""

import numpy as np
import pytest

from jaxfeed.pipeline import Dataset

GRAPHS = {
    "range": (lambda: Dataset.range(10), "c90ff9be8a2aeebf97031c40"),
    "shuffle_batch": (lambda: Dataset.range(10).shuffle(4, seed=1).batch(2), "e9b0015c565d97cc02028c43"),
    "zip_prefetch_repeat_take": (
        lambda: Dataset.zip((Dataset.range(3), Dataset.from_tensor_slices(np.arange(3)))).prefetch(2).repeat(2)
        .take(5), "3d31b99911d10da9d9a63ceb"),
    "sample": (lambda: Dataset.sample_from_datasets([Dataset.range(3), Dataset.range(4)], seed=5),
               "88ba878b2e41d63485a83ee4"),
    "random": (lambda: Dataset.random(seed=1).take(3), "47fc8a0072bf72e2e38ae7d2"),
    "concat_skip_shard": (lambda: Dataset.range(4).concatenate(Dataset.range(2)).skip(1).shard(2, 0),
                          "5e285741e7a00bf677c30afb"),
}


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_fingerprint_of_an_unchanged_graph_does_not_change(name):
    build, expected = GRAPHS[name]
    assert build().fingerprint() == expected
