"""jaxfeed against tf.data: every case of ``conformance_cases`` compared with its golden, recorded from
TensorFlow 2.21 by ``record_goldens.py`` (TensorFlow is never needed here).

One test per case and aspect: ``test_elements`` (what iteration yields, errors included, and build-time
errors), ``test_element_spec``, ``test_cardinality`` and ``test_checkpoint`` (what comes next after a
save and a restore into a fresh pipeline). A case listed in ``deliberate.DELIBERATE`` is checked by
``test_deliberate_difference`` instead, for the aspects it lists. ``KNOWN_DEFECTS`` are open defects of
issue 14 that other work is fixing: strict xfails, so a fix flips them to a failure that asks for the
mark's removal. ``FINDINGS`` are differences the goldens found that issue 14 does not name (the same).
"""

from __future__ import annotations

import glob
import json
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import conformance_cases as cases  # noqa: E402
import conformance_check as check  # noqa: E402
import deliberate  # noqa: E402
import jaxfeed_adapter as ja  # noqa: E402

# a hang guard only (the whole file runs in seconds): a case that never ends fails instead of stalling the run
pytestmark = pytest.mark.timeout(120)

GOLDENS: dict = {}
for _path in sorted(glob.glob(os.path.join(HERE, "goldens", "*.json"))):
    with open(_path) as _f:
        GOLDENS.update(json.load(_f)["cases"])
CASES = {c.name: c for c in cases.CASES}

# (case, aspect) -> reason. Open issue 14 defects being fixed elsewhere; remove a line when its fix lands.
KNOWN_DEFECTS: dict = {}

# (case, aspect) -> what tf.data does vs what jaxfeed does; not named in issue 14.
FINDINGS: dict = {}  # none open: the findings of the first recording are fixed or listed as deliberate


@pytest.fixture(scope="module")
def adapter(tmp_path_factory):
    return ja.JaxfeedAdapter(cases.make_files(str(tmp_path_factory.mktemp("conformance_files"))),
                             str(tmp_path_factory.mktemp("conformance_scratch")))


_OUTCOMES: dict = {}


def outcome(name, adapter):
    """Each case runs once per module; the aspect tests read the same outcome."""
    if name not in _OUTCOMES:
        _OUTCOMES[name] = check.run_case(CASES[name], adapter)
    return _OUTCOMES[name]


def _params(aspect, wanted):
    out = []
    for c in cases.CASES:
        golden = GOLDENS.get(c.name)
        if golden is None or not wanted(c, golden):
            continue
        if aspect in deliberate.DELIBERATE.get(c.name, {}).get("aspects", ()):
            continue
        marks = []
        reason = KNOWN_DEFECTS.get((c.name, aspect)) or FINDINGS.get((c.name, aspect))
        if reason:
            marks.append(pytest.mark.xfail(strict=True, reason=reason))
        out.append(pytest.param(c.name, id=f"{c.group}/{c.name}", marks=marks))
    return out


def _assert_none(diffs, name):
    golden = GOLDENS[name]
    assert not diffs, f"{name} differs from tf.data ({golden['group']}):\n  " + "\n  ".join(diffs)


def test_goldens_cover_every_case():
    missing = [c.name for c in cases.CASES if c.name not in GOLDENS]
    assert not missing, f"no golden for {missing}: run tests/conformance/record_goldens.py with TensorFlow"
    assert len(GOLDENS) >= 200


def test_marks_name_existing_cases():
    for table in (KNOWN_DEFECTS, FINDINGS):
        for name, aspect in table:
            assert name in CASES and aspect in ("elements", "spec", "cardinality", "checkpoint"), (name, aspect)
    for name, entry in deliberate.DELIBERATE.items():
        assert name in CASES, name
        assert set(entry["aspects"]) <= {"elements", "spec", "cardinality", "checkpoint"}


@pytest.mark.parametrize("name", _params("elements", lambda c, g: True))
def test_elements(name, adapter):
    o = outcome(name, adapter)
    golden = GOLDENS[name]
    diffs = check.differences(CASES[name], golden, o)
    # the spec, cardinality and checkpoint lines belong to their own tests
    diffs = [d for d in diffs if not d.startswith(("spec", "element_spec", "cardinality", "after save"))]
    _assert_none(diffs, name)


@pytest.mark.parametrize("name", _params("spec", lambda c, g: g["build_error"] is None))
def test_element_spec(name, adapter):
    o = outcome(name, adapter)
    r = o.record
    if r["build_error"] is not None:
        pytest.fail(f"jaxfeed raised at build: {r['build_error']['message'][:200]}")
    if r.get("spec_error"):
        pytest.fail(f"element_spec raised {r['spec_error']['message'][:200]}")
    c = CASES[name]
    diffs = check.spec_differences(GOLDENS[name]["spec"], r["spec"], not check.spec_may_be_looser(c), "spec")
    diffs += check.spec_element_differences(r["spec"], r["elements"])
    _assert_none(diffs, name)


@pytest.mark.parametrize("name", _params("cardinality", lambda c, g: g["build_error"] is None))
def test_cardinality(name, adapter):
    r = outcome(name, adapter).record
    if r["build_error"] is not None:
        pytest.fail(f"jaxfeed raised at build: {r['build_error']['message'][:200]}")
    assert r["cardinality"] == GOLDENS[name]["cardinality"], f"jaxfeed {r['cardinality']}, TF " \
                                                            f"{GOLDENS[name]['cardinality']}"


@pytest.mark.parametrize("name", _params("checkpoint", lambda c, g: bool(c.checkpoint)))
def test_checkpoint(name, adapter):
    o = outcome(name, adapter)
    if o.record["build_error"] is not None:
        pytest.fail(f"jaxfeed raised at build: {o.record['build_error']['message'][:200]}")
    diffs = [d for d in check.differences(CASES[name], GOLDENS[name], o) if d.startswith("after save")]
    _assert_none(diffs, name)


# ================================================================================ deliberate differences
def _plain(e):
    """An element as plain Python: leaves via tolist() (bytes stay bytes), tuples stay tuples."""
    if isinstance(e, tuple):
        return tuple(_plain(x) for x in e)
    if isinstance(e, dict):
        return {k: _plain(v) for k, v in e.items()}
    if isinstance(e, (np.ndarray, np.generic)):
        return e.tolist()
    return e


def _leaves(e):
    if isinstance(e, tuple):
        return [x for v in e for x in _leaves(v)]
    if isinstance(e, dict):
        return [x for v in e.values() for x in _leaves(v)]
    return [e]


def _deliberate_params():
    out = []
    for name in sorted(deliberate.DELIBERATE):
        reason = deliberate.DELIBERATE[name].get("xfail")
        out.append(pytest.param(name, id=name, marks=[pytest.mark.xfail(strict=True, reason=reason)]
                                if reason else []))
    return out


@pytest.mark.parametrize("name", _deliberate_params())
def test_deliberate_difference(name, adapter):
    """jaxfeed does what docs/deliberate-differences.md says, and tf.data (the golden) still does the other
    thing (a stale entry fails here)."""
    entry = deliberate.DELIBERATE[name]
    expect = entry["expect"]
    case = CASES[name]
    golden = GOLDENS[name]
    # the golden must really differ from jaxfeed in the listed aspects, else the entry is stale
    o = check.run_case(case, adapter)
    diffs = check.differences(case, golden, o)
    if "cardinality" in entry["aspects"] and golden["build_error"] is None and o.record["build_error"] is None:
        diffs.append("cardinality" if o.record["cardinality"] != golden["cardinality"] else "")
    assert any(diffs), f"{name}: jaxfeed now matches tf.data; remove it from deliberate.py and the doc"

    klass = ja.expected_class(expect["raises"]) if "raises" in expect else None
    when = expect.get("when")
    if when == "build":
        with pytest.raises(klass):
            case.build(adapter, np)
        return
    ds = case.build(adapter, np)
    if when == "first_use":
        with pytest.raises(klass):
            ds.element_spec
            next(iter(ds))
        return
    if when == "iter":
        got = []
        with pytest.raises(klass):
            for e in ds:
                got.append(e)
        assert len(got) == expect["after"]
        return
    if "cardinality" in expect:
        assert ds.cardinality() == expect["cardinality"]
        if expect["cardinality"] >= 0:
            assert len(ds.as_numpy()) == expect["cardinality"]
        else:  # a finite dataset whose count jaxfeed does not know: the elements are tf.data's
            o = check.run_case(case, adapter)
            assert not check.element_list_differences(golden["elements"], o.record["elements"], "exact", name)
    if "elements" in expect:
        assert [_plain(e) for e in ds] == expect["elements"]
    if "dtype" in expect:
        for e in ds:
            assert {str(np.asarray(x).dtype) for x in _leaves(e)} == {expect["dtype"]}
    if "keys" in expect:
        for e in ds:
            assert list(e) == expect["keys"]
    if "dtypes" in expect:  # a string leaf is a bytes scalar: its dtype is the spec's, object
        for e in ds:
            assert [("object" if isinstance(x, bytes) else str(np.asarray(x).dtype)) for x in _leaves(e)] == \
                expect["dtypes"]
    if "same_as_case" in expect:
        o = check.run_case(case, adapter)
        other = GOLDENS[expect["same_as_case"]]
        assert not check.element_list_differences(other["elements"], o.record["elements"], "exact", name)


def test_deliberate_skip_negative_of_infinite():
    """README: ``skip(-1)`` of an infinite dataset raises instead of running forever (tf.data hangs)."""
    from jaxfeed.pipeline import Dataset, errors

    with pytest.raises(errors.InvalidArgumentError):
        ds = Dataset.range(2).repeat().skip(-1)
        next(iter(ds))


def test_deliberate_shuffle_order_is_reproducible():
    """README: shuffle orders are jaxfeed's (not TF's; the goldens compare them as multisets), reproducible
    from the seed."""
    from jaxfeed.pipeline import Dataset

    first = Dataset.range(20).shuffle(5, seed=7).as_numpy()
    again = Dataset.range(20).shuffle(5, seed=7).as_numpy()
    assert first == again and sorted(first) == list(range(20))
