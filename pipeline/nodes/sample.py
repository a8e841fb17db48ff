"""``sample_from_datasets`` and ``choose_from_datasets``: one output stream picking among several inputs."""

from __future__ import annotations

import numbers

import numpy as np

from .. import graph, random_seed, structure
from ..errors import InvalidArgumentError
from .base import INFINITE, UNKNOWN, Node
from .concatenate import common_spec


def _check_datasets(datasets, transformation):
    if not datasets:
        raise ValueError(f"{transformation}: Invalid `datasets`. `datasets` should not be empty.")
    return common_spec([d.element_spec for d in datasets], transformation)


class SampleFromDatasets(Node):
    """tf.data's ``sample_from_datasets``: each element comes from input ``i`` with probability
    ``weights[i] / sum(weights)`` (uniform without weights). An exhausted input leaves the draw: with
    ``stop_on_empty_dataset`` the output ends there, otherwise the remaining inputs are drawn with their
    weights renormalised, until every input with a positive weight is exhausted. Seeds follow
    ``random_seed.resolve`` with this node's identity; ``rerandomize_each_iteration`` (default False)
    draws a different sequence in every epoch. ``weights`` must be a list of numbers (tf.data also takes
    a dataset of weights; jaxfeed does not)."""

    kind = "SampleFromDatasets"
    is_random = True

    def __init__(self, datasets, weights=None, seed=None, stop_on_empty_dataset=False,
                 rerandomize_each_iteration=None):
        datasets = list(datasets)
        _check_datasets(datasets, "sample_from_datasets")
        super().__init__(datasets)
        if weights is None:
            weights = [1.0] * len(datasets)
        elif hasattr(weights, "_node"):
            raise TypeError("sample_from_datasets: `weights` as a Dataset is not supported; give a list.")
        weights = np.asarray(weights).reshape(-1).tolist() if isinstance(weights, np.ndarray) else list(weights)
        if len(weights) != len(datasets):
            raise ValueError(f"sample_from_datasets: Invalid `weights`. The shape of `weights` should be "
                             f"compatible with `datasets`: got {len(weights)} weights for {len(datasets)} "
                             "datasets.")
        for w in weights:
            if isinstance(w, bool) or not isinstance(w, (numbers.Real, np.number)):
                raise TypeError(f"sample_from_datasets: weights must be numbers, got {w!r}.")
        w = np.asarray(weights, dtype=np.float64)
        if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise InvalidArgumentError(f"sample_from_datasets: weights must be finite, non-negative and not all "
                                       f"zero, got {weights}.", "SampleFromDatasets")
        self.weights = (w / w.sum()).tolist()
        self.seed = seed
        self.stop_on_empty_dataset = bool(stop_on_empty_dataset)
        self.rerandomize_each_iteration = bool(rerandomize_each_iteration)
        identity = f"SampleFromDatasets:{self.weights}:" + ":".join(graph.fingerprint(d) for d in datasets)
        self.seeds = random_seed.resolve(seed, identity)

    def params(self):
        return {"weights": self.weights, "seed": self.seed, "stop_on_empty_dataset": self.stop_on_empty_dataset,
                "rerandomize_each_iteration": self.rerandomize_each_iteration}

    def compute_spec(self):
        # tf.data leaves out inputs of constant weight 0 (one left: it is the result), so the spec -- and
        # the key order of dict elements -- is that of the inputs that can be drawn
        drawn = [d for d, w in zip(self.inputs, self.weights) if w > 0]
        return common_spec([d.element_spec for d in drawn], "sample_from_datasets")

    def cardinality(self):
        drawn = [d.cardinality() for d, w in zip(self.inputs, self.weights) if w > 0]
        if len(drawn) == 1:  # one input can be drawn: every element comes from it (tf.data knows this too)
            return drawn[0]
        if self.stop_on_empty_dataset:
            return INFINITE if all(n == INFINITE for n in drawn) else UNKNOWN
        return INFINITE if INFINITE in drawn else UNKNOWN


class ChooseFromDatasets(Node):
    """tf.data's ``choose_from_datasets``: ``choice_dataset`` (scalar int64 elements) names the input of each
    element; an index out of range raises InvalidArgumentError at that element. With
    ``stop_on_empty_dataset`` (the default) choosing an exhausted input ends the output; otherwise that
    choice is skipped. The last input node is the choice dataset."""

    kind = "ChooseFromDatasets"

    def __init__(self, datasets, choice_dataset, stop_on_empty_dataset=True):
        datasets = list(datasets)
        _check_datasets(datasets, "choose_from_datasets")
        choice_spec = choice_dataset.element_spec
        if choice_spec != structure.TensorSpec((), np.int64):
            raise TypeError(f"choose_from_datasets: `choice_dataset` must be a dataset of scalar int64 elements, "
                            f"got {choice_spec!r}.")
        super().__init__(datasets + [choice_dataset])
        self.num_datasets = len(datasets)
        self.stop_on_empty_dataset = bool(stop_on_empty_dataset)

    def params(self):
        return {"stop_on_empty_dataset": self.stop_on_empty_dataset}

    def compute_spec(self):
        return common_spec([d.element_spec for d in self.inputs[:-1]], "choose_from_datasets")

    def cardinality(self):
        return UNKNOWN
