"""The stateful-function inspection, both directions, over a catalogue of user functions."""

import numpy as np
import pytest

from jaxfeed.determinism import inspection, stateful
from jaxfeed.pipeline import Dataset

import determinism_catalogue as cat


def test_catalogue_is_large_enough():
    assert len(cat.PURE) >= 20 and len(cat.STATEFUL) >= 20


@pytest.mark.parametrize("name", sorted(cat.PURE))
def test_pure_function_is_not_flagged(name):
    report = inspection.analyse(cat.PURE[name])
    assert not report.stateful, report.findings
    assert not report.unimplemented, report.findings


@pytest.mark.parametrize("name", sorted(cat.STATEFUL))
def test_stateful_function_is_flagged_with_its_kind(name):
    fn, kind = cat.STATEFUL[name]
    report = inspection.analyse(fn)
    assert kind in {f.kind for f in report.findings}, report.findings
    assert report.stateful or report.unimplemented


def test_finding_names_the_operation_and_the_function():
    report = inspection.analyse(cat.STATEFUL["numpy_legacy_rand"][0])
    (finding,) = report.findings
    assert finding.what == "numpy.random.rand"
    assert "<lambda>" in finding.where and "determinism_catalogue.py" in finding.where


def test_helper_in_another_module_is_not_followed():
    # np.random.Generator methods called on a local generator are fine; numpy's own code is not inspected
    report = inspection.analyse(lambda x: np.linalg.norm(x) + np.median(x))
    assert report.findings == []


def test_stateful_decorator_overrides_the_inspection():
    @stateful(value=False)
    def reads_global_rng_but_declared_pure(x):
        return x + np.random.rand() * 0

    @stateful
    def looks_pure(x):
        return x

    assert not inspection.analyse(reads_global_rng_but_declared_pure).stateful
    assert inspection.analyse(looks_pure).stateful


def test_map_stateful_argument_overrides_the_inspection():
    from jaxfeed.determinism.rewriter import function_report

    node = Dataset.range(3).map(lambda x: x + np.random.rand(), stateful=False)._node
    assert not function_report(node, "map_func", node.map_func).stateful
    node = Dataset.range(3).map(lambda x: x, stateful=True)._node
    assert function_report(node, "map_func", node.map_func).stateful


def test_analysis_is_cached_per_function():
    fn = cat.PURE["numpy_math"]
    assert inspection.analyse(fn) is inspection.analyse(fn)
