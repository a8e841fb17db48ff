"""Pipelines for the checker's command-line tests (``module:function`` targets)."""

import numpy as np

from jaxfeed.pipeline import Dataset


def good():
    return Dataset.range(30).shuffle(10, seed=1).map(lambda x: x * 2, num_parallel_calls=2).batch(4)


def unseeded_shuffle():
    return Dataset.range(30).map(lambda x: x * 2).shuffle(10).batch(4)


def not_a_dataset():
    return [1, 2, 3]
