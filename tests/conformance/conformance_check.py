"""Run a conformance case on jaxfeed and list how it differs from its TensorFlow golden.

``run_case`` mirrors ``record_goldens.record_case`` (same limits, same encoding) but keeps the exception
objects, so an error is checked with ``isinstance`` against the class the golden names
(``jaxfeed.pipeline.errors.X`` for ``tf.errors.X``, else the built-in). ``differences`` returns readable
lines, empty when jaxfeed conforms.

Rules:
- errors: same class and same phase ("build": when the dataset is built; "iter": after the same number of
  elements, which must be equal);
- elements: equal structure (dict keys in the same order, namedtuple types by name and fields), leaves of
  equal dtype, shape and values; a string is ``bytes`` (never ``str``); a numeric scalar may be a numpy
  scalar or a 0-d array;
- element_spec: same nest and dtypes; each shape compatible with every element jaxfeed delivered and never
  more specific than TensorFlow's (an unknown dimension or rank is fine where TensorFlow knows it only
  for cases with user functions, whose specs TensorFlow infers by tracing);
- cardinality: equal.
"""

from __future__ import annotations

import inspect
import json
import math
import re

import numpy as np

import golden_format as gf
import jaxfeed_adapter as ja
from jaxfeed.pipeline import checkpoint

# Transformations whose element_spec tf.data infers by tracing a user function: jaxfeed may report
# less (unknown dims or rank) there, never more.
_USER_FUNCTIONS = re.compile(r"\.(map|flat_map|interleave|scan|filter|take_while|group_by_window|"
                             r"bucket_by_sequence_length|apply)\(|from_generator|_sequences\(|_repeat_self")


def spec_may_be_looser(case) -> bool:
    try:
        source = inspect.getsource(case.build)
    except (OSError, TypeError):
        return True
    return bool(_USER_FUNCTIONS.search(source))


class Outcome:
    """What jaxfeed did for one case, in the golden's shape (``record``) plus the exceptions raised."""

    def __init__(self):
        self.record: dict = {}
        self.exceptions: dict = {}  # phase -> exception


def _take(it, limit):
    out = []
    while len(out) < limit:
        try:
            out.append(next(it))
        except StopIteration:
            break
    return out


def run_case(case, t) -> Outcome:
    o = Outcome()
    r = o.record
    try:
        ds = case.build(t, np)
    except Exception as exc:  # noqa: BLE001 - compared against the golden's error
        o.exceptions["build"] = exc
        r["build_error"] = _error(exc, "build", 0)
        return o
    r["build_error"] = None
    try:
        r["spec"] = gf.encode_nest(ds.element_spec, ja.encode_spec_leaf)
    except Exception as exc:  # noqa: BLE001
        o.exceptions["spec"] = exc
        r["spec"] = None
        r["spec_error"] = _error(exc, "spec", 0)
    try:
        r["cardinality"] = int(ds.cardinality())
    except Exception as exc:  # noqa: BLE001
        o.exceptions["cardinality"] = exc
        r["cardinality"] = f"raised {type(exc).__name__}: {exc}"
    elements, r["iter_error"], r["complete"] = [], None, True
    try:
        it = iter(ds)
    except Exception as exc:  # noqa: BLE001
        o.exceptions["iter"] = exc
        r["iter_error"] = _error(exc, "iter", 0)
        it = iter(())
    try:
        while len(elements) < case.limit:
            try:
                e = next(it)
            except StopIteration:
                break
            elements.append(gf.encode_element(ja.to_numpy(e, case.limit)))
        else:
            r["complete"] = False
    except Exception as exc:  # noqa: BLE001
        o.exceptions["iter"] = exc
        r["iter_error"] = _error(exc, "iter", len(elements))
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
    r["elements"] = elements
    if case.checkpoint:
        r["checkpoints"] = [_checkpoint(case, t, n, o) for n in case.checkpoint]
    return o


def _checkpoint(case, t, steps, o):
    ds = case.build(t, np)
    with iter(ds) as it:
        taken = len(_take(it, steps))
        try:
            state = checkpoint.deserialize(checkpoint.serialize(it.get_state()))
        except Exception as exc:  # noqa: BLE001
            o.exceptions[f"save{steps}"] = exc
            return {"steps": steps, "error": _error(exc, "save", taken)}
    rest = []
    try:
        with case.build(t, np).make_iterator(state=state) as it2:
            for e in _take(it2, case.limit):
                rest.append(gf.encode_element(ja.to_numpy(e, case.limit)))
    except Exception as exc:  # noqa: BLE001
        o.exceptions[f"restore{steps}"] = exc
        return {"steps": steps, "rest": rest, "error": _error(exc, "iter", len(rest))}
    return {"steps": steps, "rest": rest, "error": None}


def _error(exc, phase, after):
    return gf.error_record(f"{type(exc).__name__}: {exc}", phase, after, type(exc).__name__)


# ================================================================================================ compare
def differences(case, golden: dict, outcome: Outcome) -> list[str]:
    out: list[str] = []
    actual = outcome.record
    g_err = golden["build_error"]
    if g_err is not None:
        exc = outcome.exceptions.get("build")
        if exc is None:
            later = _first_later_error(outcome)
            out.append(f"TF raises {g_err['class']} when the dataset is built ({g_err['message'][:120]!r}); "
                       f"jaxfeed built it" + (f" and raised {later} later" if later else " without error"))
        elif not isinstance(exc, ja.expected_class(g_err["class"])):
            out.append(f"build raised {type(exc).__name__} ({str(exc)[:160]!r}); TF raises {g_err['class']} "
                       f"({g_err['message'][:120]!r})")
        return out
    if actual["build_error"] is not None:
        return [f"jaxfeed raised at build: {actual['build_error']['message'][:200]}"]
    if actual.get("spec_error"):
        out.append(f"element_spec raised {actual['spec_error']['message'][:200]}")
    else:
        out += spec_differences(golden["spec"], actual["spec"], not spec_may_be_looser(case), "spec")
        out += spec_element_differences(actual["spec"], actual["elements"])
    if golden["cardinality"] != actual["cardinality"]:
        out.append(f"cardinality {actual['cardinality']}, TF {golden['cardinality']}")
    out += element_list_differences(golden["elements"], actual["elements"], golden["compare"], "elements")
    out += error_differences(golden.get("iter_error"), actual.get("iter_error"), outcome.exceptions.get("iter"),
                             "iteration")
    if golden.get("complete") != actual.get("complete") and not (golden.get("iter_error") or
                                                                  actual.get("iter_error")):
        out.append(f"iteration complete={actual.get('complete')} within {case.limit} elements, "
                   f"TF {golden.get('complete')}")
    for g_ck, a_ck in zip(golden.get("checkpoints", []), actual.get("checkpoints", [])):
        where = f"after save/restore at step {g_ck['steps']}"
        g_e, a_e = g_ck.get("error"), a_ck.get("error")
        if g_e and g_e["phase"] == "save":
            if not (a_e and a_e["phase"] == "save"):
                out.append(f"{where}: TF refuses to save ({g_e['class']}: {g_e['message'][:100]!r}); "
                           f"jaxfeed saved" + (f" and then raised {a_e['message'][:100]}" if a_e else ""))
            elif not isinstance(outcome.exceptions[f"save{g_ck['steps']}"], ja.expected_class(g_e["class"])):
                out.append(f"{where}: save raised {a_e['message'][:100]}; TF {g_e['class']}")
            continue
        if a_e and a_e["phase"] == "save":
            out.append(f"{where}: jaxfeed refused to save: {a_e['message'][:200]}")
            continue
        if golden["compare"] == "multiset":
            # the order is jaxfeed's own (a shuffle): the rest must be the rest of an uninterrupted run
            own = actual["elements"][g_ck["steps"]:g_ck["steps"] + len(a_ck["rest"])]
            out += element_list_differences(own, a_ck["rest"], "exact", f"{where} (vs jaxfeed's own order)")
        else:
            out += element_list_differences(g_ck["rest"], a_ck["rest"], "exact", where)
        out += error_differences(g_e, a_e, outcome.exceptions.get(f"restore{g_ck['steps']}"), where)
    return out


def _first_later_error(outcome):
    for phase in ("spec", "cardinality", "iter"):
        exc = outcome.exceptions.get(phase)
        if exc is not None:
            return f"{type(exc).__name__} at {phase} ({str(exc)[:120]!r})"
    return None


def error_differences(g, a, exc, where) -> list[str]:
    if g is None and a is None:
        return []
    if g is None:
        return [f"{where}: jaxfeed raised after {a['after']} elements: {a['message'][:200]}"]
    if a is None:
        return [f"{where}: TF raises {g['class']} after {g['after']} elements ({g['message'][:120]!r}); "
                f"jaxfeed did not"]
    out = []
    if exc is not None and not isinstance(exc, ja.expected_class(g["class"])):
        out.append(f"{where}: raised {a['message'][:160]!r}; TF raises {g['class']} ({g['message'][:120]!r})")
    if g["after"] != a["after"]:
        out.append(f"{where}: the error came after {a['after']} elements, TF after {g['after']}")
    return out


def _key(e):
    return json.dumps(e, sort_keys=True)


def element_list_differences(g_list, a_list, mode, where) -> list[str]:
    if mode == "multiset":
        g_list, a_list = sorted(g_list, key=_key), sorted(a_list, key=_key)
    out = []
    if len(g_list) != len(a_list):
        out.append(f"{where}: {len(a_list)} elements, TF {len(g_list)}")
    for i, (g, a) in enumerate(zip(g_list, a_list)):
        d = element_difference(g, a, f"{where}[{i}]")
        if d:
            out.append(d)
            break  # the first differing element says enough
    return out


def element_difference(g, a, path) -> str | None:
    if g["t"] != a["t"]:
        return f"{path}: {_sketch(a)}, TF {_sketch(g)}"
    t = g["t"]
    if t == "leaf":
        return _leaf_difference(g, a, path)
    if t == "dataset":
        diffs = element_list_differences(g["elements"], a["elements"], "exact", f"{path}<dataset>")
        return diffs[0] if diffs else None
    if t == "namedtuple" and (g["name"], g["fields"]) != (a["name"], a["fields"]):
        return f"{path}: namedtuple {a['name']}{a['fields']}, TF {g['name']}{g['fields']}"
    if t == "dict" and g["keys"] != a["keys"]:
        return f"{path}: dict keys {a['keys']}, TF {g['keys']}"
    if len(g["items"]) != len(a["items"]):
        return f"{path}: {len(a['items'])} items, TF {len(g['items'])}"
    keys = g.get("keys") or range(len(g["items"]))
    for k, gi, ai in zip(keys, g["items"], a["items"]):
        d = element_difference(gi, ai, f"{path}[{k!r}]")
        if d:
            return d
    return None


def _sketch(e):
    if e["t"] == "leaf":
        return f"leaf {e['py']} {e['dtype']}{e['shape']} = {str(e['value'])[:60]}"
    if e["t"] in ("tuple", "list"):
        return f"{e['t']} of {len(e['items'])}"
    if e["t"] == "dict":
        return f"dict {e['keys']}"
    return e["t"]


def _same_values(g, a) -> bool:
    """Equal decoded values (the dtypes are already equal, so the Python types match), NaN equal to NaN."""
    if isinstance(g, list) or isinstance(a, list):
        return (isinstance(g, list) and isinstance(a, list) and len(g) == len(a)
                and all(_same_values(x, y) for x, y in zip(g, a)))
    if isinstance(g, float) and isinstance(a, float) and math.isnan(g) and math.isnan(a):
        return True
    return g == a


def _leaf_difference(g, a, path):
    if g["py"] == "bytes" and a["py"] != "bytes":
        return f"{path}: a {a['py']} ({str(a['value'])[:60]}), TF bytes ({g['value'][:60]!r})"
    if g["py"] in ("generic", "ndarray") and a["py"] not in ("generic", "ndarray"):
        return f"{path}: a {a['py']} ({str(a['value'])[:80]}), TF a numpy {g['dtype']} value"
    if g["dtype"] != a["dtype"]:
        return f"{path}: dtype {a['dtype']} = {str(a['value'])[:60]}, TF {g['dtype']} = {str(g['value'])[:60]}"
    if g["shape"] != a["shape"]:
        return f"{path}: shape {a['shape']}, TF {g['shape']}"
    if not _same_values(g["value"], a["value"]):
        return f"{path}: {str(a['value'])[:100]}, TF {str(g['value'])[:100]}"
    return None


# ============================================================================================ element_spec
def spec_differences(g, a, exact, path) -> list[str]:
    if g["t"] != a["t"]:
        return [f"{path}: {a['t']}, TF {g['t']}"]
    t = g["t"]
    if t == "tensor":
        out = []
        if g["dtype"] != a["dtype"]:
            out.append(f"{path}: dtype {a['dtype']}, TF {g['dtype']}")
        gs, as_ = g["shape"], a["shape"]
        if as_ is None:
            if gs is not None and exact:
                out.append(f"{path}: unknown rank, TF shape {gs}")
        elif gs is None or len(gs) != len(as_):
            out.append(f"{path}: shape {as_}, TF {gs} (more specific than TF, or another rank)")
        else:
            for i, (gd, ad) in enumerate(zip(gs, as_)):
                if ad is not None and ad != gd:
                    out.append(f"{path}: shape {as_}, TF {gs} (dimension {i} claims {ad})")
                    break
                if ad is None and gd is not None and exact:
                    out.append(f"{path}: shape {as_}, TF {gs} (less specific than TF without a user function)")
                    break
        return out
    if t == "dataset_spec":
        return spec_differences(g["spec"], a["spec"], exact, f"{path}<dataset>")
    if t == "other":
        return [] if g["repr"] == a.get("repr") else [f"{path}: {a}, TF {g['repr']}"]
    if t == "namedtuple" and (g["name"], g["fields"]) != (a["name"], a["fields"]):
        return [f"{path}: namedtuple {a['name']}, TF {g['name']}"]
    if t == "dict" and g["keys"] != a["keys"]:
        return [f"{path}: dict keys {a['keys']}, TF {g['keys']}"]
    if len(g["spec"]) != len(a["spec"]):
        return [f"{path}: {len(a['spec'])} components, TF {len(g['spec'])}"]
    out = []
    keys = g.get("keys") or range(len(g["spec"]))
    for k, gs, as_ in zip(keys, g["spec"], a["spec"]):
        out += spec_differences(gs, as_, exact, f"{path}[{k!r}]")
    return out


def spec_element_differences(spec, elements) -> list[str]:
    """jaxfeed's own spec must hold for every element it delivered (a spec is a promise)."""
    for i, e in enumerate(elements):
        d = _holds(spec, e, f"spec vs element {i}")
        if d:
            return [d]
    return []


def _holds(spec, e, path):
    t = spec["t"]
    if t == "tensor":
        if e["t"] != "leaf":
            return f"{path}: spec is a tensor, element is a {e['t']}"
        if e["dtype"] != spec["dtype"]:
            return f"{path}: spec dtype {spec['dtype']}, element {e['dtype']}"
        s = spec["shape"]
        if s is not None and (len(s) != len(e["shape"]) or any(d is not None and d != x
                                                                for d, x in zip(s, e["shape"]))):
            return f"{path}: spec shape {s}, element shape {e['shape']}"
        return None
    if t == "dataset_spec":
        if e["t"] != "dataset":
            return f"{path}: spec is a dataset, element is a {e['t']}"
        for j, inner in enumerate(e["elements"]):
            d = _holds(spec["spec"], inner, f"{path}<dataset>[{j}]")
            if d:
                return d
        return None
    if t == "other":
        return None
    if e["t"] != t:
        return f"{path}: spec is a {t}, element is a {e['t']}"
    if t == "dict" and spec["keys"] != e["keys"]:
        return f"{path}: spec keys {spec['keys']}, element keys {e['keys']}"
    if len(spec["spec"]) != len(e["items"]):
        return f"{path}: spec has {len(spec['spec'])} components, element {len(e['items'])}"
    for k, (s, x) in enumerate(zip(spec["spec"], e["items"])):
        d = _holds(s, x, f"{path}[{k}]")
        if d:
            return d
    return None
