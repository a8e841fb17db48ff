"""check_determinism and its command line, on pipelines made deterministic and deliberately not."""

import os
import subprocess
import sys
import numpy as np
import pytest

from jaxfeed import determinism
from jaxfeed.determinism import checker
from jaxfeed.pipeline import Dataset

HERE = os.path.dirname(__file__)


def test_deterministic_pipeline_is_reported_deterministic():
    report = checker.check_determinism(Dataset.range(20).shuffle(5, seed=1).batch(3))
    assert report and report.elements == 7
    assert str(report) == "deterministic over 7 elements (2 runs)"


def test_unseeded_shuffle_is_caught_and_blamed():
    ds = Dataset.range(40).map(lambda x: x + 1).shuffle(8).map(lambda x: x * 2).batch(4)
    report = checker.check_determinism(ds)
    assert not report
    assert report.culprit.startswith("Shuffle(")
    assert "no seed" in report.culprit_hint


def test_stateful_map_with_global_rng_is_caught_and_blamed():
    ds = (Dataset.range(40).shuffle(8, seed=2).map(lambda x: x + np.random.randint(0, 3))
          .map(lambda x: x * 2).batch(4))
    report = checker.check_determinism(ds)
    assert not report
    assert report.culprit.startswith("Map(") and "numpy.random.randint" in report.culprit_hint


def test_parallel_map_with_deterministic_false_and_uneven_work_is_caught_and_blamed():
    from determinism_pipelines import UnevenWork

    def build():
        return Dataset.range(32).map(lambda x: x + 1).map(UnevenWork(), num_parallel_calls=2, deterministic=False)

    report = checker.check_determinism(build, variants=[{"deterministic": True}, {"deterministic": False}])
    assert not report
    assert "UnevenWork" in report.culprit and "deterministic=False" in report.culprit


def test_report_names_the_first_diverging_element_and_leaf():
    ds = Dataset.range(10).map(lambda x: {"id": x, "noise": np.float32(np.random.rand())})
    report = checker.check_determinism(ds, bisect=False)
    assert report.index == 0 and report.leaf == "['noise']" and "bytes differ" in report.detail
    assert report.culprit is None
    assert "element 0 differs between run 0 and run 1 at leaf ['noise']" in str(report)


def test_different_lengths_are_reported():
    calls = []

    def build():
        calls.append(1)
        return Dataset.range(5 + len(calls))

    report = checker.check_determinism(build, bisect=False)
    assert not report and report.index == 6 and "different lengths" in report.detail


def test_function_is_called_again_for_each_run():
    calls = []

    def build():
        calls.append(1)
        return Dataset.range(3)

    assert checker.check_determinism(build, runs=3)
    assert len(calls) == 3


def test_global_rng_map_is_deterministic_under_determinism_with_a_seed():
    determinism.enable_op_determinism()
    determinism.set_random_seed(4)
    ds = Dataset.range(20).map(lambda x: x + np.random.randint(0, 100), num_parallel_calls=2).prefetch(2)
    assert checker.check_determinism(ds, runs=3)


def test_infinite_pipeline_is_compared_up_to_max_elements():
    report = checker.check_determinism(Dataset.range(10).repeat(), max_elements=25)
    assert report and report.elements == 25


def test_fingerprint_covers_dtype_shape_and_bytes():
    fp = checker.element_fingerprint
    assert fp(np.int32(1)) != fp(np.int64(1))
    assert fp(np.zeros((2, 3))) != fp(np.zeros((3, 2)))
    assert fp((np.zeros(2), b"a")) != fp((np.zeros(2), b"b"))
    assert fp({"a": np.ones(2)}) == fp({"a": np.ones(2)})


# -------------------------------------------------------------------------------------- command line
def test_main_exits_0_for_a_deterministic_pipeline(capsys, monkeypatch):
    monkeypatch.syspath_prepend(HERE)
    assert checker.main(["determinism_pipelines:good"]) == 0
    assert "deterministic over 8 elements" in capsys.readouterr().out


def test_main_exits_1_and_prints_the_culprit(capsys, monkeypatch):
    monkeypatch.syspath_prepend(HERE)
    assert checker.main(["determinism_pipelines:unseeded_shuffle", "--runs", "2"]) == 1
    out = capsys.readouterr().out
    assert "NOT deterministic" in out and "Shuffle(" in out


def test_main_exits_2_for_a_missing_target(capsys):
    assert checker.main(["no_such_module_xyz:build"]) == 2


def test_console_script_runs():
    script = os.path.join(os.path.dirname(sys.executable), "jaxfeed-check-determinism")
    if not os.path.exists(script):
        pytest.skip("console script not installed in this environment")
    out = subprocess.run([script, "determinism_pipelines:good", "--parallelism", "1,2"], cwd=HERE,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("deterministic over 8 elements")


def test_main_with_enable_reports_a_refused_pipeline(capsys, monkeypatch):
    monkeypatch.syspath_prepend(HERE)
    assert checker.main(["determinism_pipelines:unseeded_shuffle", "--enable"]) == 1
    assert "set_random_seed" in capsys.readouterr().out


def test_culprit_without_a_known_cause_is_moved_to_the_nearest_suspect_below():
    ds = Dataset.range(10).map(lambda x: x * 2, num_parallel_calls=2, deterministic=False).map(lambda x: x + 1)
    top = ds._node
    assert checker._nearest_suspect(top) is top.inputs[0]
    assert checker._nearest_suspect(Dataset.range(3).map(lambda x: x)._node) is None
