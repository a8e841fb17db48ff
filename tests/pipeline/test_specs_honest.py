"""element_spec is a promise about every element (issue 14, defect 3).

tf.data finds a function's output shapes by tracing it: only what holds for every input becomes a static
dimension (docs/tf-behaviour.md#element-specs: ``fill([x], x)`` gives ``(None,)``). jaxfeed runs a function on one sample
instead, so without a declaration it claims the sample's structure, dtypes and ranks with every dimension
unknown -- less specific than tf.data at times, never wrong. ``output_signature=`` declares more, and each
element is checked against it (InvalidArgumentError naming the transformation and the element).
"""

import numpy as np
import pytest

from jaxfeed.formats.example import (FixedLenFeature, VarLenFeature, VarLenValue, make_example, parse_example,
                                     parse_single_example, parsed_signature)
from jaxfeed.pipeline import DatasetSpec, Dataset, TensorSpec, errors
from jaxfeed.pipeline.structure import flatten, shape_compatible
from jaxfeed.pipeline.testing import assert_resumes_everywhere


def conforms(spec, element) -> bool:
    """Every leaf of ``element`` has the dtype and a shape compatible with ``spec``'s leaf."""
    return all(np.dtype(s.dtype) == np.asarray(x).dtype and shape_compatible(s.shape, np.shape(x))
               for s, x in zip(flatten(spec), flatten(element)))


def zeros_of_length(x):
    return np.zeros(x, np.float32)


def growing_state(state, x):
    new = np.append(state, x)
    return new, new


# ------------------------------------------------------------------------------ no declaration: honest
SAMPLE_BASED = {
    "map": lambda: Dataset.range(1, 4).map(lambda x: np.zeros(x)),
    "parallel map": lambda: Dataset.range(1, 4).map(lambda x: np.zeros((2, x)), num_parallel_calls=2),
    "flat_map": lambda: Dataset.range(1, 4).flat_map(lambda x: Dataset.from_tensors(np.zeros(x))),
    "interleave": lambda: Dataset.range(1, 4).interleave(lambda x: Dataset.from_tensors(np.zeros(x)),
                                                         cycle_length=2),
    "scan with a growing state": lambda: Dataset.range(4).scan(np.zeros(0, np.int64), growing_state),
    "group_by_window": lambda: Dataset.range(6).group_by_window(
        lambda x: x % 2, lambda k, w: w.batch(3 if k else 2), window_size=3),
    "bucket_by_sequence_length": lambda: Dataset.range(1, 8).map(lambda x: np.arange(x)).bucket_by_sequence_length(
        len, [3, 5], [2, 2, 2]),
}


@pytest.mark.parametrize("name", sorted(SAMPLE_BASED))
def test_every_element_fits_the_spec_claimed_before_iterating(name):
    ds = SAMPLE_BASED[name]()
    spec = ds.element_spec
    elements = list(ds)
    assert len({np.shape(flatten(e)[0]) for e in elements}) > 1  # the shapes really vary
    assert all(conforms(spec, e) for e in elements), (spec, [np.shape(x) for x in elements])


def test_a_map_claims_rank_and_dtype_with_unknown_dimensions():
    assert Dataset.range(1, 4).map(lambda x: np.zeros(x)).element_spec == TensorSpec((None,), np.float64)  # was (1,)
    # scalars have no dimensions to doubt: the common case keeps its full spec
    assert Dataset.range(3).map(lambda x: x * 2).element_spec == TensorSpec((), np.int64)
    assert Dataset.range(3).map(lambda x: (x, {"v": np.zeros((2, 3))})).element_spec == \
        (TensorSpec((), np.int64), {"v": TensorSpec((None, None), np.float64)})


def test_bucket_by_sequence_length_spec_is_tf_s():
    ds = SAMPLE_BASED["bucket_by_sequence_length"]()
    assert ds.element_spec == TensorSpec((None, None), np.int64)  # was (None, 3); TF (None, None)


def test_a_growing_scan_state_gives_unknown_dimensions():
    assert SAMPLE_BASED["scan with a growing state"]().element_spec == TensorSpec((None,), np.int64)  # was (1,)


def test_a_varlen_decoder_output_has_an_unknown_length():
    records = [make_example({"ids": list(range(n))}).SerializeToString() for n in (0, 2, 5)]
    ds = Dataset.from_tensor_slices(records).map(
        lambda r: parse_single_example(r, {"ids": VarLenFeature(np.int64)})["ids"])
    assert ds.element_spec == TensorSpec((None,), np.int64)  # was (0,)
    assert [len(x) for x in ds] == [0, 2, 5]


def test_a_decoder_declares_its_static_shapes_with_parsed_signature():
    features = {"ids": VarLenFeature(np.int64), "xy": FixedLenFeature([2], np.float32),
                "name": FixedLenFeature([], "string")}
    records = [make_example({"ids": list(range(n)), "xy": [n + 0.5, -n - 0.5], "name": [b"r%d" % n]})
               .SerializeToString() for n in (0, 2, 5)]
    single = Dataset.from_tensor_slices(records).map(lambda r: parse_single_example(r, features),
                                                     output_signature=parsed_signature(features))
    assert single.element_spec == {"ids": TensorSpec((None,), np.int64), "xy": TensorSpec((2,), np.float32),
                                   "name": TensorSpec((), object)}
    assert [len(e["ids"]) for e in single] == [0, 2, 5]
    batched = Dataset.from_tensor_slices(records).batch(2).map(
        lambda r: parse_example(r, features), output_signature=parsed_signature(features, batched=True))
    assert batched.element_spec["xy"] == TensorSpec((None, 2), np.float32)
    assert isinstance(batched.element_spec["ids"], VarLenValue)
    assert [e["ids"].row_splits.tolist() for e in batched] == [[0, 0, 2], [0, 5]]


def test_consumers_of_the_spec_work_with_unknown_dimensions():
    ragged = Dataset.range(1, 5).map(lambda x: np.arange(x))
    padded = ragged.padded_batch(2)
    assert padded.element_spec == TensorSpec((None, None), np.int64)
    assert [b.shape for b in padded] == [(2, 2), (2, 4)]
    fixed = Dataset.range(8).map(lambda x: np.full(3, x)).batch(4, drop_remainder=True)
    assert fixed.element_spec == TensorSpec((4, None), np.int64)  # the batch dimension stays static
    rebatched = fixed.rebatch(2)
    assert rebatched.element_spec == TensorSpec((2, None), np.int64)
    assert [b.shape for b in rebatched] == [(2, 3)] * 4
    assert len(list(ragged.batch(1).unbatch())) == 4


# --------------------------------------------------------------------------------- map(output_signature=)
def test_a_declared_map_signature_is_the_spec_and_holds():
    sig = TensorSpec((None,), np.float32)
    ds = Dataset.range(1, 4).map(zeros_of_length, output_signature=sig)
    assert ds.element_spec == sig
    assert [len(x) for x in ds] == [1, 2, 3]


def test_breaking_a_declared_map_signature_raises_naming_map_and_the_element():
    ds = Dataset.range(1, 4).map(zeros_of_length, output_signature=TensorSpec((1,), np.float32))
    assert ds.element_spec == TensorSpec((1,), np.float32)
    it = iter(ds)
    assert next(it).shape == (1,)
    with pytest.raises(errors.InvalidArgumentError, match=r"map\(zeros_of_length\).*shape \(2,\).*\(1,\)") as e:
        next(it)
    assert any("input element 1" in note for note in getattr(e.value, "__notes__", []))


@pytest.mark.parametrize("kwargs", [{}, {"num_parallel_calls": 2}, {"num_parallel_calls": 2, "deterministic": False}])
def test_the_check_runs_on_every_executor(kwargs):
    ds = Dataset.range(1, 4).map(zeros_of_length, output_signature=TensorSpec((1,), np.float32), **kwargs)
    with pytest.raises(errors.InvalidArgumentError, match="output_signature"):
        list(ds)


def test_the_check_runs_in_worker_processes():
    ds = Dataset.range(1, 4).map(zeros_of_length, output_signature=TensorSpec((1,), np.float32),
                                 num_parallel_calls=2, executor="process")
    with pytest.raises(errors.InvalidArgumentError, match="output_signature"):
        list(ds)


def test_the_check_survives_map_fusion_and_map_batch_fusion():
    sig = TensorSpec((1,), np.float32)
    fused = Dataset.range(1, 4).map(zeros_of_length, output_signature=sig).map(lambda x: x)
    with pytest.raises(errors.InvalidArgumentError, match="output_signature"):
        list(fused)
    outer = Dataset.range(1, 4).map(lambda x: x).map(zeros_of_length, output_signature=sig)
    assert outer.element_spec == sig
    with pytest.raises(errors.InvalidArgumentError, match="output_signature"):
        list(outer)
    with pytest.raises(errors.InvalidArgumentError, match="output_signature"):
        list(Dataset.range(1, 4).map(zeros_of_length, output_signature=sig).batch(2))


def test_a_vectorized_map_is_checked_per_batch():
    sig = TensorSpec((2,), np.int64)
    calls = []

    def pair(x):
        calls.append(np.shape(x))
        return np.stack([x, x], axis=-1)

    ok = Dataset.range(4).map(pair, vectorized=True, output_signature=sig).batch(2)
    assert [b.tolist() for b in ok] == [[[0, 0], [1, 1]], [[2, 2], [3, 3]]]
    assert calls == [(2,), (2,)]  # still one call per batch
    bad = Dataset.range(4).map(lambda x: np.stack([x, x, x], axis=-1), vectorized=True,
                               output_signature=sig).batch(2)
    with pytest.raises(errors.InvalidArgumentError, match="output_signature"):
        list(bad)


def test_a_vectorized_map_called_per_element_gets_the_element_check():
    sig = TensorSpec((2,), np.int64)
    # one row more than declared: a batch's shape, but this map runs per element (no batch after it)
    rows = Dataset.range(3).map(lambda x: np.stack([[x, x]] * 3), vectorized=True, output_signature=sig)
    with pytest.raises(errors.InvalidArgumentError, match=r"shape \(3, 2\)"):
        list(rows)


def test_python_values_take_the_declared_dtype_numpy_values_must_have_it():
    ints = Dataset.range(3).map(lambda x: int(x) * 2, output_signature=TensorSpec((), np.int64))
    assert [type(x) for x in ints] == [np.int64] * 3
    lists = Dataset.range(2).map(lambda x: [1.5, 2.0], output_signature=TensorSpec((2,), np.float64))
    assert list(lists)[0].dtype == np.float64
    with pytest.raises(errors.InvalidArgumentError, match="float64.*declares float32"):
        list(Dataset.range(2).map(lambda x: np.zeros(2), output_signature=TensorSpec((2,), np.float32)))
    with pytest.raises(errors.InvalidArgumentError, match="without loss"):
        list(Dataset.range(2).map(lambda x: 2**40, output_signature=TensorSpec((), np.int32)))
    # a Python float goes to float64 from its own value, not through the float32 default
    assert list(Dataset.range(1).map(lambda x: 0.1, output_signature=TensorSpec((), np.float64))) == [0.1]
    for bad, sig in [(True, TensorSpec((), np.int64)), (1, TensorSpec((), np.bool_)), (2**70, TensorSpec((), np.int64)),
                     ({1, 2}, TensorSpec((2,), np.int64))]:
        with pytest.raises(errors.InvalidArgumentError, match="output_signature"):
            list(Dataset.range(1).map(lambda x, bad=bad: bad, output_signature=sig))


def test_a_declared_structure_must_match():
    sig = {"a": TensorSpec((), np.int64), "b": TensorSpec((), np.int64)}
    good = Dataset.range(2).map(lambda x: {"b": x, "a": x + 1}, output_signature=sig)
    assert [(e["a"], e["b"]) for e in good] == [(1, 0), (2, 1)]
    with pytest.raises(errors.InvalidArgumentError, match="output_signature"):
        list(Dataset.range(2).map(lambda x: {"a": x}, output_signature=sig))
    with pytest.raises(errors.InvalidArgumentError, match="output_signature"):
        list(Dataset.range(2).map(lambda x: (x, x), output_signature=TensorSpec((), np.int64)))


def test_ignore_errors_skips_an_element_that_breaks_the_signature():
    ds = Dataset.range(5).map(lambda x: np.zeros(2 if x == 2 else 1), output_signature=TensorSpec((1,), np.float64))
    assert len(list(ds.ignore_errors())) == 4


def test_a_signature_must_be_made_of_specs():
    with pytest.raises(TypeError, match="TensorSpec"):
        Dataset.range(2).map(lambda x: x, output_signature=(np.int64,))
    with pytest.raises(TypeError, match="list"):
        Dataset.range(2).map(lambda x: x, output_signature=[TensorSpec((), np.int64)])


def test_the_signature_is_part_of_the_fingerprint():
    a = Dataset.range(2).map(zeros_of_length, output_signature=TensorSpec((None,), np.float32))
    b = Dataset.range(2).map(zeros_of_length, output_signature=TensorSpec((1,), np.float32))
    c = Dataset.range(2).map(zeros_of_length, output_signature=TensorSpec((None,), np.float32))
    assert a.fingerprint() == c.fingerprint() != b.fingerprint()


# ---------------------------------------------------------------- flat_map / interleave / scan signatures
def inner_zeros(x):
    return Dataset.from_tensors(np.zeros(x, np.float32)).repeat(2)


@pytest.mark.parametrize("how", ["flat_map", "interleave", "parallel interleave"])
def test_a_declared_dataset_function_signature_is_the_spec_and_is_checked(how):
    def apply(ds, sig):
        if how == "flat_map":
            return ds.flat_map(inner_zeros, output_signature=sig)
        kwargs = {"num_parallel_calls": 2} if how == "parallel interleave" else {}
        return ds.interleave(inner_zeros, cycle_length=2, output_signature=sig, **kwargs)

    loose = apply(Dataset.range(1, 4), TensorSpec((None,), np.float32))
    assert loose.element_spec == TensorSpec((None,), np.float32)
    assert sorted(len(x) for x in loose) == [1, 1, 2, 2, 3, 3]
    tight = apply(Dataset.range(1, 4), TensorSpec((1,), np.float32))
    assert tight.element_spec == TensorSpec((1,), np.float32)
    with pytest.raises(errors.InvalidArgumentError, match=r"(flat_map|interleave)\(inner_zeros\).*input 2.*"
                                                          r"element 0.*shape \(2,\)"):
        list(tight)


def test_a_checked_flat_map_resumes_exactly():
    sig = TensorSpec((None,), np.float32)
    assert_resumes_everywhere(lambda: Dataset.range(1, 4).flat_map(inner_zeros, output_signature=sig))


def test_a_declared_scan_signature_checks_the_outputs():
    ok = Dataset.range(3).scan(np.zeros(0, np.int64), growing_state, output_signature=TensorSpec((None,), np.int64))
    assert ok.element_spec == TensorSpec((None,), np.int64) and [len(x) for x in ok] == [1, 2, 3]
    bad = Dataset.range(3).scan(np.zeros(0, np.int64), growing_state, output_signature=TensorSpec((1,), np.int64))
    with pytest.raises(errors.InvalidArgumentError, match=r"scan\(growing_state\).*shape \(2,\)"):
        list(bad)


def test_from_generator_signature_is_the_spec_and_is_checked():
    def gen():
        yield np.zeros(3, np.float32)
        yield np.zeros(2, np.float32)

    ds = Dataset.from_generator(gen, output_signature=TensorSpec((3,), np.float32))
    assert ds.element_spec == TensorSpec((3,), np.float32)
    it = iter(ds)
    assert next(it).shape == (3,)
    with pytest.raises(errors.InvalidArgumentError, match=r"shape \(2,\).*\(3,\)"):
        next(it)


def test_a_map_may_declare_dataset_valued_outputs():
    sig = DatasetSpec(TensorSpec((), np.int64))
    ds = Dataset.range(3).map(lambda x: Dataset.range(x), output_signature=sig)
    assert ds.element_spec == sig
    assert [int(v) for v in ds.flat_map(lambda d: d)] == [0, 0, 1]
    bad = Dataset.range(3).map(lambda x: Dataset.range(x).map(lambda v: v * 1.5), output_signature=sig)
    with pytest.raises(errors.InvalidArgumentError, match="float64.*declares int64"):
        list(bad.flat_map(lambda d: d))


# ------------------------------------------------------------------------------ empty inputs
def test_an_empty_sample_inner_dataset_does_not_decide_the_outer_spec():
    # the first inner dataset (x=0) is empty: its spec comes from a placeholder element, as tf.data traces
    ds = Dataset.range(3).flat_map(
        lambda x: Dataset.range(x).interleave(lambda y: Dataset.from_tensors(y).repeat(2), cycle_length=2))
    assert ds.element_spec == TensorSpec((), np.int64)  # was TensorSpec(None, string)
    assert all(conforms(ds.element_spec, e) for e in ds)


def test_a_function_over_an_empty_input_has_its_rank_and_dtype():
    empty = Dataset.range(0).map(lambda x: np.full([x], x))
    assert empty.element_spec == TensorSpec((None,), np.int64)
    assert empty.padded_batch(2).element_spec == TensorSpec((None, None), np.int64)  # was a ValueError
    assert list(empty.padded_batch(2)) == []
    scanned = Dataset.range(0).scan(np.int64(0), lambda s, x: (s + x, (s, np.zeros(x))))
    assert scanned.element_spec == (TensorSpec((), np.int64), TensorSpec((None,), np.float64))


def test_a_function_that_refuses_the_placeholder_leaves_the_spec_unknown():
    ds = Dataset.range(0).map(lambda x: [10, 20][x + 5])
    assert ds.element_spec.shape is None and list(ds) == []


# ------------------------------------------------------------- a first element that is an error
def fails_on_zero(x):
    if x == 0:
        raise ValueError("bad element 0")
    return x


def varying(x):
    return np.full([int(x) % 3], x)


def test_a_function_failing_on_the_first_element_still_has_a_spec_and_ignore_errors_skips_it():
    """Found by differential fuzzing against tf.data: the spec was learned on the first element only, so
    ``map(parse).ignore_errors()`` over a bad first record raised that record's error from ``element_spec``
    (and from anything that asks for it at build: padded_batch, concatenate, a distributed dataset), where
    tf.data traces the function and meets the error only when iterating."""
    ds = Dataset.range(3).map(fails_on_zero).ignore_errors()
    assert ds.element_spec == TensorSpec((), np.int64)
    assert [int(x) for x in ds] == [1, 2]
    with pytest.raises(ValueError, match="bad element 0"):  # without ignore_errors: raised in its place
        list(Dataset.range(3).map(fails_on_zero))


def test_an_input_whose_first_element_is_an_error_builds_and_raises_when_iterated():
    first_batch_fails = Dataset.range(3).map(varying).batch(2)  # [[], [1]] cannot be stacked
    ds = first_batch_fails.concatenate(first_batch_fails.map(lambda x: x))  # concatenate asks both specs
    assert ds.element_spec == TensorSpec((None, None), np.int64)
    with pytest.raises(errors.InvalidArgumentError, match="Cannot add tensor to the batch"):
        next(iter(ds))


def always_fails(x):
    raise KeyError(f"no row {int(x)}")


def test_a_function_that_fails_on_every_element_raises_its_first_error_from_the_spec():
    with pytest.raises(KeyError, match="no row 0"):
        Dataset.range(3).map(always_fails).element_spec


def test_a_function_of_the_windows_of_an_empty_input_has_the_spec_tf_data_traces():
    """Found by differential fuzzing: over an empty input, flat_map(lambda w: w.batch(2)) of windows had the
    made-up spec TensorSpec(None, object) -- shown as a string tensor -- where tf.data traces int64 (None,):
    no placeholder was made for a dataset. It is now an empty dataset of the window's spec."""
    assert Dataset.range(0).window(2).flat_map(lambda w: w.batch(2)).element_spec == TensorSpec((None,), np.int64)
    assert Dataset.range(0, output_type=np.int32).window(3).flat_map(lambda w: w).element_spec == \
        TensorSpec((), np.int32)
    pairs = Dataset.range(0).map(lambda x: {"b": x, "a": (x, b"s")}).window(2).flat_map(lambda w: Dataset.zip(w))
    assert pairs.element_spec == {"a": (TensorSpec((), np.int64), TensorSpec((), object)),
                                  "b": TensorSpec((), np.int64)}


def test_a_function_whose_input_fails_on_every_sampled_element_gets_its_spec_from_a_placeholder():
    """Every sampled batch fails to stack (rows of 0, 1, 2 values): the spec comes from a placeholder of the
    input's spec, as for an empty input (tf.data traces; the error comes when iterating)."""
    failing = Dataset.range(40).map(lambda x: np.full([int(x) % 2], x)).batch(2)
    ds = failing.map(lambda x: x.astype(bool))
    assert ds.element_spec == TensorSpec((None, None), np.bool_)
    with pytest.raises(errors.InvalidArgumentError, match="Cannot add tensor to the batch"):
        next(iter(ds))
