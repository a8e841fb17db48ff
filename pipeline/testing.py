"""Shared harnesses for properties every pipeline must have (used by jaxfeed's tests; usable by yours).

- ``assert_elements_equal(a, b)``: two element lists are equal leaf by leaf (dtype, shape, bytes).
- ``assert_resumes_everywhere(make)``: saving after k elements and restoring into a fresh iterator of a
  freshly built pipeline continues exactly like the uninterrupted run -- for every k, end included.
- ``assert_resumes_everywhere_with_errors(make)``: the same for a pipeline whose ``next`` raises on the way
  (and goes on after, as tf.data iterators do): an error is an outcome like an element, and a restore must
  give the same errors in the same places.
- ``assert_same_after_rewrites(ds)``: the rewritten graph yields exactly what the plain graph yields.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from . import structure
from .options import Options


def to_python(element):
    """A comparable form of an element: leaves become (dtype, shape, bytes) or the bytes value itself."""
    def leaf(x):
        if isinstance(x, bytes):
            return ("bytes", x)
        if hasattr(x, "_node"):  # a window: compare its elements
            return ("dataset", [to_python(e) for e in x])
        arr = np.asarray(x)
        if arr.dtype == object:
            return ("object", arr.shape, [bytes(v) if isinstance(v, (bytes, bytearray)) else v
                                          for v in arr.reshape(-1).tolist()])
        return (arr.dtype.str, arr.shape, arr.tobytes())

    return structure.describe(element), [leaf(x) for x in structure.flatten(element)]


def assert_elements_equal(actual, expected, what: str = "elements"):
    actual, expected = list(actual), list(expected)
    for i, (a, e) in enumerate(zip(actual, expected)):
        if to_python(a) != to_python(e):
            raise AssertionError(f"{what}: element {i} differs:\n  got      {a!r}\n  expected {e!r}")
    if len(actual) != len(expected):
        raise AssertionError(f"{what}: got {len(actual)} elements, expected {len(expected)}")


def assert_resumes_everywhere(make: Callable[[], object], ks=None, max_elements: int = 10_000,
                              label: str | None = None):
    """Resume anywhere: for each k (default: every k from 0 to the end, then ``"exhausted"``: after a
    ``next`` that raised StopIteration), read k elements and save; the state goes through the checkpoint
    format (``checkpoint.serialize`` to bytes and ``deserialize``, as a saved file does) and is restored into
    a fresh iterator of a freshly built ``make()``. Checked, for every k:

    - the k elements read and the restored iterator's rest equal the uninterrupted run;
    - the saved iterator, read on after saving, gives the same rest (saving disturbs nothing);
    - the state has the same layout as at every other k (keys, nesting, leaf types: ``state_layout.py``), as
      Grain's harness checks -- except at a layout change ``state_layout.known_varying`` lists.

    ``label`` names the pipeline in failure messages. Returns the uninterrupted run."""
    from . import checkpoint, state_layout

    expected = []
    it = iter(make())
    for element in it:
        expected.append(element)
        if len(expected) > max_elements:
            raise AssertionError(f"pipeline produced more than {max_elements} elements; pass a finite one")
    it.close()
    n = len(expected)
    ks = list(range(n + 1)) + ["exhausted"] if ks is None else list(ks)
    name = label or "pipeline"
    seen = None  # (layout of the states so far, the k it was first seen at)
    for k in ks:
        where = f"{name} resumed after {k} elements"
        dataset = make()
        first = iter(dataset)
        head = [next(first) for _ in range(n if k == "exhausted" else k)]
        if k == "exhausted":
            try:
                next(first)
            except StopIteration:
                pass
            else:
                raise AssertionError(f"{where}: an element after the {n} of the uninterrupted run")
        state = first.get_state()
        data = checkpoint.serialize(state)
        rest_of_first = list(first)
        first.close()
        restored = make().make_iterator(state=checkpoint.deserialize(data))
        tail = list(restored)
        restored.close()
        assert_elements_equal(head + tail, expected, what=where)
        assert_elements_equal(rest_of_first, tail, what=f"{where} (the saved iterator read on vs the restored one)")
        seen = _check_layout(state, k, seen, dataset, name, state_layout)
    return expected


def outcomes(it, limit: int) -> tuple[list, bool]:
    """Up to ``limit`` outcomes of ``it``, in order, going on after errors: ``("element", to_python(e))``
    or ``("error", type name, message, notes)``. Returns ``(outcomes, ended)``: ``ended`` when StopIteration
    came before ``limit``."""
    out = []
    while len(out) < limit:
        try:
            out.append(("element", to_python(next(it))))
        except StopIteration:
            return out, True
        except Exception as e:  # noqa: BLE001 - an error is an outcome: compared, then read past
            out.append(("error", type(e).__name__, str(e), list(getattr(e, "__notes__", None) or [])))
    return out, False


def assert_resumes_everywhere_with_errors(make: Callable[[], object], ks=None, max_outcomes: int = 1_000,
                                          label: str | None = None):
    """Resume anywhere, errors included ("resume exactly or refuse"): the uninterrupted run's outcomes are
    its elements and its errors, in order (``outcomes``: ``next`` is called again after an error, until
    StopIteration). For each k (default: every k from 0 to the end, then ``"exhausted"``), read k outcomes --
    an error counts as one -- and save; the state goes through ``checkpoint.serialize``/``deserialize`` and
    is restored into a fresh iterator of a freshly built ``make()``. Checked, for every k:

    - the k outcomes read and the restored iterator's outcomes equal the uninterrupted run: an error read
      ahead by a stage (buffered, or deferred past the elements before it) must be raised again in its place,
      never dropped, never repeated;
    - the saved iterator, read on after saving, gives the same rest (saving disturbs nothing).

    A stage that cannot save an error it holds must refuse to save (``get_state`` raises): the harness then
    fails naming k and that error, which is the test's to expect. Layouts are ``assert_resumes_everywhere``'s
    to check (an error saved in place of an element is a layout of its own). Returns the uninterrupted run's
    outcomes."""
    from . import checkpoint

    name = label or "pipeline"
    expected, ended = outcomes(iter(make()), max_outcomes + 1)
    if not ended:
        raise AssertionError(f"{name} gave more than {max_outcomes} outcomes; pass a finite one")
    n = len(expected)
    ks = list(range(n + 1)) + ["exhausted"] if ks is None else list(ks)
    for k in ks:
        where = f"{name} resumed after {k} outcomes"
        first = iter(make())
        head, _ = outcomes(first, n if k == "exhausted" else k)
        if k == "exhausted" and outcomes(first, 1)[0]:
            raise AssertionError(f"{where}: an outcome after the {n} of the uninterrupted run")
        try:
            data = checkpoint.serialize(first.get_state())
        except Exception as e:
            raise AssertionError(f"{where}: saving refused: {type(e).__name__}: {e}") from e
        rest_of_first, _ = outcomes(first, n + 1)
        first.close()
        restored = make().make_iterator(state=checkpoint.deserialize(data))
        tail, _ = outcomes(restored, n + 1)
        restored.close()
        _assert_same_outcomes(head + tail, expected, where)
        _assert_same_outcomes(rest_of_first, tail, f"{where} (the saved iterator read on vs the restored one)")
    return expected


def _assert_same_outcomes(actual: list, expected: list, where: str) -> None:
    for i, (a, e) in enumerate(zip(actual, expected)):
        if a != e:
            raise AssertionError(f"{where}: outcome {i} differs:\n  got      {_show(a)}\n  expected {_show(e)}")
    if len(actual) != len(expected):
        extra = actual[len(expected)] if len(actual) > len(expected) else expected[len(actual)]
        raise AssertionError(f"{where}: got {len(actual)} outcomes, expected {len(expected)} (first one not "
                             f"in both: {_show(extra)})")


def _show(outcome) -> str:
    if outcome[0] == "error":
        return f"{outcome[1]}: {outcome[2]:.300}"
    return f"element {outcome[1]!r:.300}"


def _check_layout(state, k, seen, dataset, name, state_layout):
    """The layout of the states so far, ``state``'s included; AssertionError when it does not fit."""
    mine = state_layout.layout(state)
    if seen is None:
        merged, conflict = state_layout.unify(mine, state_layout.ANY)
        first_k = k
    else:
        merged, conflict = state_layout.unify(seen[0], mine)
        first_k = seen[1]
    if conflict is None:
        return merged, first_k
    if state_layout.excused(conflict, dataset) is not None:
        return seen if seen is not None else (mine, k)
    raise AssertionError(f"{name}: the state saved after {k} elements has another layout than the one saved "
                         f"after {first_k}: {state_layout.describe(conflict)}")


def assert_same_after_rewrites(dataset, options: Options | None = None):
    """The graph the passes produce yields exactly what the plain graph yields."""
    plain = Options()
    plain.experimental_optimization.apply_default_optimizations = False
    expected = list(dataset.with_options(plain))
    actual = list(dataset.with_options(options) if options is not None else dataset)
    assert_elements_equal(actual, expected, what="rewritten vs plain graph")
    return actual
