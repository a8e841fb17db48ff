"""Determinism gaps seen through distribution (issue 15 item 9).

- A function that calls ``next()`` on an iterator it shares with other calls (a generator, an
  ``itertools.count``, an open iterator) is stateful: found by the inspection, run serially under
  determinism, refused by elastic resume, named by ``check_determinism``.
- ``check_determinism`` given a function that draws randomness while building the pipeline (a salt a map
  closes over) says the builds differ and names the node whose captured value differs -- not the last
  node of the graph.
"""

import functools
import itertools

import numpy as np
import pytest

from jaxfeed import determinism
from jaxfeed.determinism import checker, inspection
from jaxfeed.pipeline import Dataset, elastic, errors


def counter():
    i = 0
    while True:
        yield i
        i += 1


SHARED = counter()


def add_from_global_generator(x):
    return x + next(SHARED)


def add_from_closed_over_iterator():
    it = iter(range(10**6))
    return lambda x: x + next(it)


class AddFromOwnGenerator:
    def __init__(self):
        self.source = counter()

    def __call__(self, x):
        return x + next(self.source)


def add_next(x, source):
    return x + next(source)


SHARED_FUNCTIONS = {
    "global generator": add_from_global_generator,
    "closed-over iterator": add_from_closed_over_iterator(),
    "itertools.count": (lambda c: (lambda x: x + next(c)))(itertools.count()),
    "generator held by self": AddFromOwnGenerator(),
    "generator as a partial argument": functools.partial(add_next, source=counter()),
    "generator as a default argument": (lambda x, source=counter(): x + next(source)),
}


# ---------------------------------------------------------------------------------- shared iterators
@pytest.mark.parametrize("name", list(SHARED_FUNCTIONS))
def test_next_on_a_shared_iterator_is_found_stateful(name):
    report = inspection.analyse(SHARED_FUNCTIONS[name])
    assert report.stateful, report.findings
    assert any(f.kind == "shared_iterator" for f in report.findings), report.findings


def test_iterating_a_local_iterator_is_not_stateful():
    def pure(x):
        it = iter(range(3))
        return x + next(it) + sum(v for v in [1, 2])

    assert not inspection.analyse(pure).stateful


def test_elastic_resume_refuses_a_map_over_a_shared_generator_naming_it():
    ds = Dataset.range(20).map(add_from_closed_over_iterator()).batch(4)
    with pytest.raises(errors.FailedPreconditionError, match=r"Map\(.*not a pure function.*shared iterator"):
        elastic.check_supported(ds)


def test_a_map_over_a_shared_generator_runs_serially_under_determinism():
    determinism.enable_op_determinism()
    ds = Dataset.range(20).map(add_from_closed_over_iterator(), num_parallel_calls=4)
    it = ds.make_iterator()
    assert any("stateful" in str(r) and "Map" in str(r) for r in it.rewrites), it.rewrites
    it.close()


def test_check_determinism_blames_the_map_over_a_shared_generator():
    shared = counter()
    report = checker.check_determinism(Dataset.range(20).map(lambda x: x + next(shared)).batch(4))
    assert not report
    assert report.culprit.startswith("Map(") and "shared iterator" in report.culprit_hint


# ---------------------------------------------------------------------------------- randomness drawn at build
def test_a_salt_drawn_while_building_is_reported_as_builds_that_differ_at_its_map():
    def build():
        salt = np.random.rand()
        return Dataset.range(20).map(lambda x: x * 1.0 + salt).batch(4)

    report = checker.check_determinism(build)
    assert not report and report.builds_differ
    assert report.culprit.startswith("Map(") and "Batch" not in report.culprit
    assert "`salt`" in report.culprit_hint
    assert "the builds differ" in str(report) and "Map(" in str(report)


def test_random_source_data_drawn_while_building_is_blamed_on_the_source():
    def build():
        return Dataset.from_tensor_slices(np.random.rand(12)).map(lambda x: x * 2).batch(3)

    report = checker.check_determinism(build)
    assert report.builds_differ and report.culprit.startswith("TensorSlices(")
    assert "tensors" in report.culprit_hint


def test_builds_with_a_seeded_salt_are_deterministic():
    def build():
        salt = np.random.default_rng(7).random()
        return Dataset.range(20).map(lambda x: x * 1.0 + salt).batch(4)

    assert checker.check_determinism(build, runs=3)


def test_a_build_that_differs_only_in_a_captured_constant_is_still_bisected_when_it_is_nondeterministic_itself():
    calls = []

    def build():
        calls.append(1)
        tag = len(calls)  # differs per build but does not change the data
        return Dataset.range(20).map(lambda x: x + 0 * tag + np.random.rand()).batch(4)

    report = checker.check_determinism(build)
    assert not report and not report.builds_differ
    assert report.culprit.startswith("Map(") and "numpy.random" in report.culprit_hint
