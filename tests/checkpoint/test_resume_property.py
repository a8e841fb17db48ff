"""Resume anywhere: for random pipelines built from every transformation that exists, reading k elements,
saving, serialising and restoring into a new iterator over a freshly built pipeline continues exactly
like the uninterrupted run -- for every k, the end and an exhausted iterator included; a subset is
restored in a new process.

The default profile keeps the run short on 2 cores; ``-m slow`` runs many more examples.
"""

import json
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings

import resume_recipes as R
from jaxfeed.pipeline import checkpoint
from jaxfeed.pipeline.testing import assert_elements_equal, assert_resumes_everywhere

HERE = os.path.dirname(os.path.abspath(__file__))
# per process: concurrent test runs must not rewrite each other's files mid-read
FILES = os.path.join(__import__("tempfile").gettempdir(), f"jaxfeed-resume-{os.getpid()}")
OPS = list(R.available_ops())  # decided once, at collection: hypothesis needs a fixed set of choices

SETTINGS = dict(deadline=None, derandomize=False, suppress_health_check=[HealthCheck.too_slow],
                database=None)


def uninterrupted(recipe) -> list:
    out = []
    it = iter(R.build(recipe))
    for element in it:
        out.append(element)
        if len(out) > R.MAX_ELEMENTS:
            break
    it.close()
    return out


def bounded(recipe):
    """The recipe, with a final take when its output would be longer than MAX_ELEMENTS."""
    if len(uninterrupted(recipe)) > R.MAX_ELEMENTS:
        recipe = dict(recipe, ops=recipe["ops"] + [["take", {"count": R.MAX_ELEMENTS}]])
    return recipe


def check_resume_everywhere(recipe, make=None, label=None):
    """The shared harness (``jaxfeed.pipeline.testing.assert_resumes_everywhere``: every k, the end and an
    exhausted iterator, through the checkpoint format, the state's layout stable) over a recipe."""
    make = make if make is not None else (lambda: R.build(recipe))
    assert_resumes_everywhere(make, max_elements=R.MAX_ELEMENTS,
                              label=label or f"recipe {json.dumps(recipe)}")


@settings(max_examples=30, **SETTINGS)
@given(R.recipes(FILES, ops=OPS))
def test_random_pipeline_resumes_exactly_after_every_element(recipe):
    check_resume_everywhere(bounded(recipe))


@pytest.mark.slow
@pytest.mark.timeout(3600)
@settings(max_examples=600, **SETTINGS)
@given(R.recipes(FILES, ops=OPS, max_ops=7))
def test_random_pipeline_resumes_exactly_after_every_element_many_examples(recipe):
    check_resume_everywhere(bounded(recipe))


@pytest.mark.parametrize("op", OPS)
@settings(max_examples=4, **SETTINGS)
@given(data=__import__("hypothesis").strategies.data())
def test_each_transformation_resumes_exactly_in_random_pipelines(op, data):
    """Every transformation, placed at a random step of a random pipeline (the joint test may miss some)."""
    check_resume_everywhere(bounded(data.draw(R.recipes(FILES, ops=OPS, max_ops=4, require=op))))


def test_process_pool_map_with_blocks_in_flight_resumes_exactly_after_every_element():
    """map(executor="process") is left out of the random draws (a worker pool per iterator is slow)."""
    check_resume_everywhere(None, lambda: R.Dataset.range(16).map(R.bump, num_parallel_calls=2, executor="process")
                            .batch(4).prefetch(2), label="range -> process map -> batch -> prefetch")


# ---------------------------------------------------------------------------------- new process
RESTORE_SCRIPT = """
import json, sys
sys.path.insert(0, {here!r})
import resume_recipes as R
from jaxfeed.pipeline import checkpoint
cases = json.load(open(sys.argv[1]))
for case in cases:
    state = open(case["state"], "rb").read()
    it = R.build(case["recipe"]).make_iterator(state=state)
    open(case["out"], "wb").write(checkpoint.serialize(list(it)))
    it.close()
"""


def test_state_restores_in_a_new_process(tmp_path):
    """States of random pipelines, saved here, restored by a fresh interpreter that rebuilds the pipeline
    from its recipe: one subprocess for all cases."""
    from hypothesis import strategies as st

    recipes = []

    @settings(max_examples=int(os.environ.get("JAXFEED_NEW_PROCESS_EXAMPLES", "6")), **SETTINGS)
    @given(R.recipes(FILES, ops=OPS, max_ops=4), st.floats(0, 1))
    def collect(recipe, fraction):
        recipes.append((bounded(recipe), fraction))

    collect()
    cases, expected_all = [], []
    for i, (recipe, fraction) in enumerate(recipes):
        expected = uninterrupted(recipe)
        k = int(round(fraction * len(expected)))
        it = iter(R.build(recipe))
        head = [next(it) for _ in range(k)]
        (tmp_path / f"{i}.state").write_bytes(checkpoint.serialize(it.get_state()))
        it.close()
        cases.append({"recipe": recipe, "state": str(tmp_path / f"{i}.state"), "out": str(tmp_path / f"{i}.out")})
        expected_all.append((head, expected, k))
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    script = tmp_path / "restore.py"
    script.write_text(RESTORE_SCRIPT.format(here=HERE))
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "cases.json")], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-6000:]
    for case, (head, expected, k) in zip(cases, expected_all):
        tail = checkpoint.deserialize((tmp_path / os.path.basename(case["out"])).read_bytes())
        assert_elements_equal(head + tail, expected,
                              what=f"recipe {json.dumps(case['recipe'])} restored in a new process after {k}")
