"""Resume exactly or refuse, errors included: a restored iterator raises the errors the uninterrupted one would
have raised next, in their places (tf.data's iterators go on after a function's error; so do ours), whatever a
stage had read ahead when the state was saved (a buffered ``Failure``, an error deferred past the elements
before it). Each pipeline injects failures -- a map function that raises for some values, a generator that
yields values that do not fit its signature, a filter predicate that raises -- under or over one stage, and
``testing.assert_resumes_everywhere_with_errors`` saves after every outcome.

Pipelines are small (about 24 elements) so that every k runs; the functions compare ``int(x)`` so the map
stays per element (the vectorized_map pass would run plain arithmetic once per batch)."""

import numpy as np
import pytest

from jaxfeed.pipeline import AUTOTUNE, Dataset, TensorSpec
from jaxfeed.pipeline import checkpoint
from jaxfeed.pipeline.testing import assert_resumes_everywhere_with_errors, outcomes, to_python

N = 24
BAD = {3, 10, 11, 17}  # 10 and 11: two errors in a row


def _leaves(args):
    for a in args:
        if isinstance(a, tuple):
            yield from _leaves(a)
        else:
            yield from np.asarray(a).reshape(-1)


def boom(*args):
    """Raises for an element holding a BAD value (any leaf, any row: it works over batches and tuples too)."""
    for v in _leaves(args):
        if int(v) in BAD:
            raise ValueError(f"bad value {int(v)}")
    return args if len(args) > 1 else args[0]


def raising_predicate(*args):
    boom(*args)
    return True


def values():
    """A replayable generator whose BAD values are strings: each fails its int64 signature, the next goes on."""
    for i in range(N):
        yield f"bad {i}" if i in BAD else np.int64(i)


# ------------------------------------------------------------------ the failing stages (on range(N))
def map_sequential(ds):
    return ds.map(boom)


def map_parallel(ds):
    return ds.map(boom, num_parallel_calls=2)


def map_autotune(ds):
    return ds.map(boom, num_parallel_calls=AUTOTUNE, executor="thread")


def map_process(ds):
    return ds.map(boom, num_parallel_calls=2, executor="process")


def filter_raising(ds):
    return ds.filter(raising_predicate)


FAILING = {"map": map_sequential, "map_par2": map_parallel, "map_autotune": map_autotune,
           "map_process": map_process, "filter_raises": filter_raising}


def generator_source():
    return Dataset.from_generator(values, output_signature=TensorSpec([], np.int64), replayable=True)


# ------------------------------------------------------------------ the stages around them
def _inner(i):
    return Dataset.range(i * 6, i * 6 + 6)


def _even(*args):
    return int(np.asarray(args[-1]).reshape(-1)[0]) % 2 == 0


STAGES = {
    "map": lambda ds: ds.map(lambda x: x),
    "map_par2": lambda ds: ds.map(lambda x: x, num_parallel_calls=2),
    "batch": lambda ds: ds.batch(4),
    "batch_drop": lambda ds: ds.batch(5, drop_remainder=True),
    "padded_batch": lambda ds: ds.padded_batch(4),
    "unbatch": lambda ds: ds.batch(3).unbatch(),
    "filter": lambda ds: ds.filter(_even),
    "prefetch2": lambda ds: ds.prefetch(2),
    "prefetch_autotune": lambda ds: ds.prefetch(AUTOTUNE),
    "shuffle": lambda ds: ds.shuffle(8, seed=7),
    "zip": lambda ds: Dataset.zip(ds, Dataset.range(100, 100 + N)),
    "concatenate": lambda ds: ds.take(12).concatenate(ds.skip(12)),
    "take": lambda ds: ds.take(15),
    "skip": lambda ds: ds.skip(5),
    "scan": lambda ds: ds.scan(np.int64(0), lambda s, x: (s + 1, x)),
    "enumerate": lambda ds: ds.enumerate(),
    "repeat": lambda ds: ds.take(12).repeat(2),
    "cache": lambda ds: ds.cache(),
    "rebatch": lambda ds: ds.batch(4).rebatch(3),
}

# Stages that consume their input whole and need the failing stage under them (their elements are datasets,
# or they choose among inputs).
UNDER_ONLY = {
    "interleave": lambda ds: Dataset.range(4).interleave(lambda i: ds.skip(i * 6).take(6), cycle_length=2),
    "interleave_par2": lambda ds: Dataset.range(4).interleave(lambda i: ds.skip(i * 6).take(6), cycle_length=2,
                                                             num_parallel_calls=2),
    "flat_map": lambda ds: Dataset.range(4).flat_map(lambda i: ds.skip(i * 6).take(6)),
    "sample": lambda ds: Dataset.sample_from_datasets([ds.take(12), ds.skip(12)], seed=5),
    "choose": lambda ds: Dataset.choose_from_datasets([ds.take(12), ds.skip(12)],
                                                      Dataset.range(N).map(lambda i: i % 2)),
    "group_by_window": lambda ds: ds.group_by_window(lambda x: x % 2, lambda k, w: w.batch(3), window_size=3),
    "window": lambda ds: ds.window(3).flat_map(lambda w: w.batch(3)),
    "ignore_errors": lambda ds: ds.ignore_errors(),
    "batch_ignore_errors": lambda ds: ds.batch(4).ignore_errors(),
}

# Stages a map over which fails per element: over a stage whose inputs are datasets, the function is inside.
OVER_INPUTS = {
    "interleave": lambda fail: Dataset.range(4).interleave(lambda i: fail(_inner(i)), cycle_length=2),
    "interleave_par2": lambda fail: Dataset.range(4).interleave(lambda i: fail(_inner(i)), cycle_length=2,
                                                               num_parallel_calls=2),
    "flat_map": lambda fail: Dataset.range(4).flat_map(lambda i: fail(_inner(i))),
    "sample": lambda fail: Dataset.sample_from_datasets([fail(Dataset.range(12)), Dataset.range(12, N)], seed=5),
    "choose": lambda fail: Dataset.choose_from_datasets([Dataset.range(12), fail(Dataset.range(12, N))],
                                                        Dataset.range(N).map(lambda i: i % 2)),
}


# Stages that may meet an error past the elements a ``next_many`` returned (they keep it for their next call)
# and stages above them that hold what they read across calls: a state saved in between must keep the error.
DEFERRING = {
    "batch": lambda ds: ds.batch(3),
    "padded_batch": lambda ds: ds.padded_batch(3),
    "rebatch": lambda ds: ds.batch(4).rebatch(3),
    "window": lambda ds: ds.window(3).flat_map(lambda w: w.batch(3)),
    "shuffle": lambda ds: ds.shuffle(5, seed=3),
    "sample": lambda ds: Dataset.sample_from_datasets([ds.take(12), ds.skip(12)], seed=5),
    "zip": lambda ds: Dataset.zip(ds, ds).map(lambda a, b: a),
    "scan": lambda ds: ds.scan(np.int64(0), lambda s, x: (s + 1, x)),
}
HOLDING = {
    "interleave": lambda ds: Dataset.range(2).interleave(lambda i: ds.shard(2, i), cycle_length=2),
    "group_by_window": lambda ds: ds.group_by_window(lambda x: int(np.asarray(x).reshape(-1)[0]) % 2,
                                                     lambda k, w: w.batch(2), window_size=2),
    "filter": lambda ds: ds.filter(lambda x: True),
    "unbatch": lambda ds: ds.batch(2).unbatch(),
    "shuffle": lambda ds: ds.shuffle(4, seed=1),
    "prefetch": lambda ds: ds.prefetch(2),
}


def _bad_dtype(x):
    return np.float32(x) if int(x) in BAD else x


def _bad_shape(x):
    return np.zeros(2 if int(x) in BAD else 1, np.int64) + x


def _failing_scan(s, x):
    boom(x)
    return s + 1, x


def _failing_key(x):
    boom(x)
    return x % 2


def _inner_or_boom(i):
    return boom(np.int64(3)) if int(i) in (1, 4) else Dataset.range(i * 4, i * 4 + 4)


# Stages whose own function or check fails (the elements under them are fine).
OWN_FAILURES = {
    "scan_func": lambda: Dataset.range(N).scan(np.int64(0), _failing_scan),
    "flat_map_func": lambda: Dataset.range(6).flat_map(_inner_or_boom),
    "interleave_func": lambda: Dataset.range(6).interleave(_inner_or_boom, cycle_length=2),
    "interleave_func_par2": lambda: Dataset.range(6).interleave(_inner_or_boom, cycle_length=2, num_parallel_calls=2),
    "group_by_window_key_func": lambda: Dataset.range(N).group_by_window(_failing_key, lambda k, w: w.batch(3),
                                                                         window_size=3),
    "padded_batch_too_small": lambda: Dataset.range(N).map(_bad_shape).padded_batch(3, padded_shapes=[1]),
    "take_while_predicate": lambda: Dataset.range(N).take_while(raising_predicate),
    "map_output_signature": lambda: Dataset.range(N).map(_bad_dtype, output_signature=TensorSpec([], np.int64)),
    "filter_not_a_bool": lambda: Dataset.range(N).filter(lambda x: np.int64(1) if int(x) in BAD else True),
    "parallel_batch_stacking": lambda: Dataset.range(N).map(_bad_shape).prefetch(2).batch(
        2, num_parallel_calls=2).unbatch(),
}


def _cases():
    for fail_name in ("map", "map_par2", "map_autotune", "filter_raises"):
        fail = FAILING[fail_name]
        for name, stage in STAGES.items():
            yield pytest.param(lambda fail=fail, stage=stage: stage(fail(Dataset.range(N))),
                               id=f"{fail_name}-under-{name}")
            yield pytest.param(lambda fail=fail, stage=stage: fail(stage(Dataset.range(N))),
                               id=f"{fail_name}-over-{name}")
        for name, stage in UNDER_ONLY.items():
            yield pytest.param(lambda fail=fail, stage=stage: stage(fail(Dataset.range(N))),
                               id=f"{fail_name}-under-{name}")
        for name, stage in OVER_INPUTS.items():
            yield pytest.param(lambda fail=fail, stage=stage: stage(fail), id=f"{fail_name}-inside-{name}")
    for name, stage in {**STAGES, **UNDER_ONLY}.items():
        yield pytest.param(lambda stage=stage: stage(generator_source()), id=f"generator-under-{name}")
    for name, make in OWN_FAILURES.items():
        yield pytest.param(make, id=f"own-{name}")
    sources = {"generator": generator_source, "filter_raises": lambda: filter_raising(Dataset.range(N))}
    for source_name, source in sources.items():
        for name, deferring in DEFERRING.items():
            for holder_name, holding in HOLDING.items():
                yield pytest.param(lambda s=source, d=deferring, h=holding: h(d(s())),
                                   id=f"{source_name}-under-{name}-under-{holder_name}")
    for name in ("batch",):  # worker processes take seconds to start: one stage each way
        yield pytest.param(lambda stage=STAGES[name]: map_process(stage(Dataset.range(N))),
                           id=f"map_process-over-{name}")
        yield pytest.param(lambda stage=STAGES[name]: stage(map_process(Dataset.range(N))),
                           id=f"map_process-under-{name}")


@pytest.mark.parametrize("make", list(_cases()))
def test_resumes_with_errors_in_their_places(make, request):
    run = assert_resumes_everywhere_with_errors(make)
    errors = [o for o in run if o[0] == "error"]
    assert run and (not errors if "ignore_errors" in request.node.callspec.id else errors), run


@pytest.mark.parametrize("kind", ["cache_file", "cache_file_repeat", "cache_repeat", "snapshot"])
def test_resumes_with_errors_through_files_and_epochs(kind, tmp_path):
    # A pass with an error is not recorded (cache, snapshot): each pass reads the input, errors and all.
    path = str(tmp_path / "data")
    makes = {"cache_file": lambda: map_sequential(Dataset.range(N)).cache(path),
             "cache_file_repeat": lambda: map_sequential(Dataset.range(12)).cache(path).repeat(2),
             "cache_repeat": lambda: map_sequential(Dataset.range(12)).cache().repeat(2),
             "snapshot": lambda: map_sequential(Dataset.range(N)).snapshot(path)}
    assert _errors(assert_resumes_everywhere_with_errors(makes[kind]))


# ------------------------------------------------------------------ regressions, one behaviour each
def _good(outs):
    return [o for o in outs if o[0] == "element"]


def _errors(outs):
    return [o for o in outs if o[0] == "error"]


@pytest.mark.parametrize("fail", [map_sequential, filter_raising], ids=["elements", "indices"])
@pytest.mark.parametrize("read", [lambda ds: ds, lambda ds: ds.prefetch(2)], ids=["next", "next_many"])
def test_shuffle_outputs_the_input_without_its_failed_elements_and_raises_their_errors(fail, read):
    # An input error took a slot and a draw, or broke the fill: over indices the iterator then raised
    # AttributeError forever; over elements the buffer stayed short after an error in the fill (another
    # order), and a refill failing in a many-element read (under prefetch) dropped the elements already taken.
    shuffled = lambda ds: read(ds.shuffle(8, seed=7))
    outs, ended = outcomes(iter(shuffled(fail(Dataset.range(N)))), 100)
    clean, _ = outcomes(iter(shuffled(fail(Dataset.range(N)).ignore_errors())), 100)
    assert ended and _good(outs) == clean
    assert [o[1] for o in _errors(outs)] == ["ValueError"] * len(BAD)


@pytest.mark.parametrize("reader", [lambda ds: ds.filter(lambda x: True), lambda ds: ds.batch(2)],
                         ids=["filter", "batch"])
def test_shuffle_over_indices_raises_the_error_it_kept_for_a_stage_reading_its_indices(reader):
    # next_indices did not look at the error kept for the next call (only next and next_many do): a stage
    # reading indices (filter, batch) went on without it.
    make = lambda: reader(filter_raising(Dataset.range(N)).shuffle(5, seed=3)).take(1000)
    by_many = _calls_of_next_many(iter(make()), 3)
    assert len(_errors(by_many)) == len(BAD) and by_many == outcomes(iter(make()), 100)[0]


def _calls_of_next_many(it, n, calls=None) -> list:
    """The outcomes of ``calls`` calls of ``it.next_many(n)`` (all of them, to the end, when None), as
    ``testing.outcomes`` writes them."""
    out = []
    while calls is None or calls > 0:
        calls = None if calls is None else calls - 1
        try:
            got = it.next_many(n)
        except Exception as e:  # noqa: BLE001 - an outcome
            out.append(("error", type(e).__name__, str(e), list(getattr(e, "__notes__", None) or [])))
            continue
        if not got:
            break
        out.extend(("element", to_python(e)) for e in got)
    return out


def assert_resumes_after_each_next_many(make, n=3):
    """A state saved after any number of ``next_many(n)`` calls, restored, goes on with the uninterrupted
    run's rest, errors in place. ``next_many`` is where a stage may keep an error it met past the elements it
    returned for its next call -- under a stage that returns those elements and lets a state be saved."""
    expected = _calls_of_next_many(iter(make()), n)
    for calls in range(len(expected) + 1):
        it = iter(make())
        head = _calls_of_next_many(it, n, calls)
        data = checkpoint.serialize(it.get_state())
        it.close()
        restored = make().make_iterator(state=checkpoint.deserialize(data))
        rest, _ = outcomes(restored, len(expected) + 1)
        restored.close()
        assert head + rest == expected, f"restored after {calls} calls of next_many({n})"
        if len(head) == len(expected):
            break




KEEPING_AN_ERROR_PAST_THEIR_OUTPUT = {
    "batch": lambda: generator_source().batch(3),
    "padded_batch": lambda: generator_source().padded_batch(3),
    "rebatch": lambda: generator_source().batch(4).rebatch(3),
    "window": lambda: generator_source().window(3),
    "ragged_batch": lambda: generator_source().ragged_batch(3),
    "shuffle": lambda: Dataset.range(N).map(boom).shuffle(5, seed=3),
    "shuffle_indices": lambda: filter_raising(Dataset.range(N)).shuffle(5, seed=3),
    "signature_check": lambda: Dataset.range(4).flat_map(lambda i: Dataset.range(i * 6, i * 6 + 6).map(_bad_dtype),
                                                         output_signature=TensorSpec([], np.int64)),
}


@pytest.mark.parametrize("stage", list(KEEPING_AN_ERROR_PAST_THEIR_OUTPUT))
def test_a_state_saved_under_another_stage_keeps_the_error_a_stage_kept_for_its_next_call(stage):
    # The stage (not the root: ``take`` reads it with next_many) met an error past the elements it returned
    # and kept it for its next call; its state did not hold it, so a restored run went on past the error.
    make = KEEPING_AN_ERROR_PAST_THEIR_OUTPUT[stage]
    assert_resumes_after_each_next_many(lambda: make().take(1000))


@pytest.mark.parametrize("name", list(OWN_FAILURES))
def test_a_stage_whose_own_function_fails_resumes_after_each_next_many(name):
    assert_resumes_after_each_next_many(lambda: OWN_FAILURES[name]().take(1000))


def test_a_parallel_batch_saves_a_batch_that_failed_to_stack_and_raises_it_in_place():
    # Saving finished the batches in flight with future.result(): a batch that failed to stack made
    # get_state itself raise the batch's error.
    make = lambda: Dataset.range(6).map(_bad_shape).prefetch(2).batch(2, num_parallel_calls=2)
    it = iter(make())
    assert next(it).shape == (2, 1)
    restored = make().make_iterator(state=checkpoint.deserialize(checkpoint.serialize(it.get_state())))
    with pytest.raises(Exception, match="Cannot add tensor to the batch"):
        next(restored)
    assert next(restored).shape == (2, 1)


def test_ragged_batch_read_many_at_a_time_loses_no_batch_before_an_error():
    # Its next_many (sparse_batch's too: the same loop) made several batches in one loop: an error dropped the
    # batches made before it.
    make = lambda: generator_source().map(lambda x: np.reshape(x, [1])).ragged_batch(3).take(1000)
    by_many = _calls_of_next_many(iter(make()), 3)
    assert len(_errors(by_many)) == len(BAD) and by_many == outcomes(iter(make()), 100)[0]


def test_padded_batch_pads_by_the_same_plan_whichever_element_comes_first():
    # Over a map its plan came from the first element's exact shape: a first element larger than the padded
    # shape made a ValueError (not the DataLossError of any other batch), and a restore, starting elsewhere,
    # raised other errors than the uninterrupted run.
    outs, _ = outcomes(iter(Dataset.range(3, 9).map(_bad_shape).padded_batch(3, padded_shapes=[1])), 10)
    assert [o[:2] for o in _errors(outs)] == [("error", "DataLossError")] and len(_good(outs)) == 1
    assert "input element 0 has shape [2]" in _errors(outs)[0][2]


def test_a_fused_map_and_batch_keeps_the_error_it_kept_for_its_next_call():
    # Its state dropped the error its next_many kept for its next call (fixed in map_batch.py, 37bcfc6).
    assert_resumes_after_each_next_many(lambda: Dataset.range(N).map(boom).batch(3).take(1000))


def test_a_saved_signature_mismatch_is_restored_as_itself():
    # It came back as UnknownError("jaxfeed.pipeline.nodes.signature.SignatureMismatch: ..."): the checkpoint
    # format rebuilt only the classes of errors.py and built-ins.
    from jaxfeed.pipeline.checkpoint.format import deserialize, serialize
    from jaxfeed.pipeline.engine.blocks import Failure
    from jaxfeed.pipeline.iterators.generator_convert import Mismatch
    from jaxfeed.pipeline.nodes.signature import SignatureMismatch

    error = deserialize(serialize({"e": Failure(SignatureMismatch("got float32", "map"))}))["e"].error
    assert type(error) is SignatureMismatch and str(error) == str(SignatureMismatch("got float32", "map"))
    not_an_op_error = deserialize(serialize({"e": Failure(Mismatch("x"))}))["e"].error
    assert type(not_an_op_error).__name__ == "UnknownError"


def test_a_fused_map_and_batch_saves_a_batch_that_failed_to_stack():
    # get_state raised the batch's stacking error from a worker's block (fixed in map_batch.py, 37bcfc6).
    assert_resumes_everywhere_with_errors(
        lambda: Dataset.range(N).map(_bad_shape, num_parallel_calls=2).batch(2).unbatch())
