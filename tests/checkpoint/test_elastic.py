"""Elastic resume: states of W workers, merged, continue on W' workers with exactly the elements not yet
consumed globally; each new worker j yields remaining[j::W'] in the global dataset's order."""

import collections

import numpy as np
import pytest

from jaxfeed.pipeline import Dataset, checkpoint, elastic, errors


def square(x):
    return x * x


def is_kept(x):
    return x % 5 != 0


def global_ds():
    return Dataset.range(60).shuffle(16, seed=3).map(square)


def rows(element):
    """The shard elements in one delivered element (a batch holds several)."""
    arr = np.asarray(element)
    return [int(v) for v in arr.reshape(-1)] if arr.ndim else [int(arr)]


def run_job(make_global, num_workers, steps, tail=None, previous=None):
    """Each worker reads steps[i] elements and saves; returns (values consumed, serialized states)."""
    consumed, states = [], []
    for i in range(num_workers):
        it = elastic.worker_iterator(make_global(), num_workers, i, previous, tail)
        for _ in range(steps[i]):
            consumed.extend(rows(next(it)))
        states.append(checkpoint.serialize(it.get_state()))
        it.close()
    return consumed, states


def finish_job(make_global, num_workers, global_state, tail=None):
    per_worker = []
    for j in range(num_workers):
        it = elastic.worker_iterator(make_global(), num_workers, j, global_state, tail)
        per_worker.append([v for e in it for v in rows(e)])
    return per_worker


def expected_split(make_global, consumed, num_workers, global_state):
    """remaining[j::W'] computed from the global order, with the consumed values removed."""
    order = [int(x) for x in make_global()]
    remaining = [order[p] for p in elastic.remaining_positions(global_state, len(order))]
    left = collections.Counter(order) - collections.Counter(consumed)
    assert collections.Counter(remaining) == left
    return [remaining[j::num_workers] for j in range(num_workers)]


@pytest.mark.parametrize("w, w2, steps", [(2, 3, [7, 4]), (3, 2, [5, 5, 2]), (2, 2, [0, 9]), (3, 1, [20, 20, 20])])
def test_states_of_w_workers_continue_on_w2_workers_with_exactly_the_remaining_elements(w, w2, steps):
    consumed, states = run_job(global_ds, w, steps)
    gstate = elastic.merge_states(states, global_ds())
    got = finish_job(global_ds, w2, gstate)
    assert got == expected_split(global_ds, consumed, w2, gstate)
    assert sorted(consumed + sum(got, [])) == sorted(int(x) for x in global_ds())


def test_per_worker_tail_of_map_batch_prefetch_counts_only_delivered_elements():
    def tail(d):
        return d.map(lambda x: x + 0, num_parallel_calls=2).batch(3).prefetch(2)

    consumed, states = run_job(global_ds, 2, [3, 2], tail=tail)
    gstate = elastic.merge_states(states, global_ds(), tail=tail)
    got = finish_job(global_ds, 3, gstate, tail=tail)
    assert got == expected_split(global_ds, consumed, 3, gstate)


def test_elastic_resume_twice_w2_to_w3_to_w2():
    consumed, states = run_job(global_ds, 2, [6, 3])
    g1 = elastic.merge_states(states, global_ds())
    more, states = run_job(global_ds, 3, [2, 4, 1], previous=g1)
    g2 = elastic.merge_states(states, global_ds(), previous=g1)
    got = finish_job(global_ds, 2, g2)
    assert got == expected_split(global_ds, consumed + more, 2, g2)
    assert sorted(consumed + more + sum(got, [])) == sorted(int(x) for x in global_ds())


def test_pipeline_with_a_pure_filter_resumes_elastically():
    def make():
        return Dataset.range(50).shuffle(10, seed=1).filter(is_kept).map(square)

    consumed, states = run_job(make, 3, [4, 2, 3])
    gstate = elastic.merge_states(states, make())
    assert finish_job(make, 2, gstate) == expected_split(make, consumed, 2, gstate)


def test_reshuffling_shuffle_in_a_later_epoch_resumes_with_the_saved_epoch_order():
    def make():
        ds = Dataset.range(30).shuffle(30, seed=4)
        ds._iterations = 0
        return ds

    consumed, states = run_job(make, 2, [5, 5])
    gstate = elastic.merge_states(states, make())
    assert finish_job(make, 3, gstate) == expected_split(make, consumed, 3, gstate)


def test_global_state_holds_only_the_lag_between_workers():
    _, states = run_job(global_ds, 2, [10, 10])
    gstate = elastic.merge_states(states, global_ds())
    assert gstate["holes"] == [] and gstate["frontier"] == 20


def test_batch_inside_the_global_dataset_makes_batches_the_unit():
    def make():
        return Dataset.range(40).shuffle(40, seed=2).batch(4)

    consumed, states = run_job(make, 2, [3, 1])
    gstate = elastic.merge_states(states, make())
    got = finish_job(make, 3, gstate)
    order = [tuple(rows(b)) for b in make()]
    remaining = [order[p] for p in elastic.remaining_positions(gstate, len(order))]
    assert [[tuple(got[j][k:k + 4]) for k in range(0, len(got[j]), 4)] for j in range(3)] == \
        [remaining[j::3] for j in range(3)]


# ------------------------------------------------------------------------------------------ refusals
@pytest.mark.parametrize("make, node", [
    (lambda: Dataset.range(10).shuffle(4), "Shuffle"),
    (lambda: Dataset.range(10).map(square, stateful=True), "Map"),
    (lambda: Dataset.range(10).map(square, num_parallel_calls=2, deterministic=False), "Map"),
])
def test_nondeterministic_pipeline_is_refused_naming_the_node(make, node):
    with pytest.raises(errors.FailedPreconditionError, match=f"does not support this pipeline: {node}"):
        elastic.worker_dataset(make(), 2, 0)


def noisy_keep(x):
    return np.random.rand() < 0.5


def test_filter_whose_predicate_draws_from_the_global_rng_is_refused_naming_it():
    with pytest.raises(errors.FailedPreconditionError, match=r"Filter\(.*not a pure function.*numpy.random"):
        elastic.worker_dataset(Dataset.range(10).filter(noisy_keep), 2, 0)


def test_streaming_source_is_refused_unless_replay_is_allowed(tmp_path):
    text = pytest.importorskip("jaxfeed.formats.text")
    path = tmp_path / "a.txt"
    path.write_bytes(b"".join(b"%d\n" % i for i in range(10)))
    with pytest.raises(errors.FailedPreconditionError, match="re-read every element"):
        elastic.worker_dataset(text.TextLineDataset([str(path)]), 2, 0)
    assert len(list(elastic.worker_dataset(text.TextLineDataset([str(path)]), 2, 0, allow_replay=True))) == 5


def test_unsupported_node_after_the_shard_is_refused_naming_it():
    def tail(d):
        return d.shuffle(3, seed=1)

    _, states = run_job(global_ds, 2, [1, 1], tail=tail)
    with pytest.raises(errors.FailedPreconditionError, match="Shuffle"):
        elastic.merge_states(states, global_ds(), tail=tail)


def test_states_in_the_wrong_worker_order_are_refused():
    _, states = run_job(global_ds, 2, [1, 1])
    with pytest.raises(errors.FailedPreconditionError, match="worker 0 of 2"):
        elastic.merge_states(states[::-1], global_ds())


def test_global_state_of_another_pipeline_is_refused_naming_the_node():
    _, states = run_job(global_ds, 2, [1, 1])
    gstate = elastic.merge_states(states, global_ds())
    with pytest.raises(errors.FailedPreconditionError, match="Shuffle"):
        elastic.worker_dataset(Dataset.range(60).shuffle(8, seed=3).map(square), 2, 0, gstate)


# ------------------------------------------------------------------------------------------ property
def bump_rng(x, rng):
    return x * 100 + rng.integers(0, 100)


GLOBALS = [
    lambda: Dataset.range(37).shuffle(9, seed=5, reshuffle_each_iteration=True).repeat(2).map(square),
    lambda: Dataset.range(45).filter(is_kept).shuffle(7, seed=2).map(bump_rng, with_rng=True, seed=3),
    lambda: Dataset.from_tensor_slices(np.arange(30) * 7).skip(2).take(25).shuffle(25, seed=8),
]
TAILS = [None, lambda d: d.prefetch(3), lambda d: d.map(square, num_parallel_calls=2).prefetch(2)]


def test_random_worker_counts_and_progress_resume_with_exactly_the_remaining_elements():
    from hypothesis import given, settings, strategies as st

    @settings(max_examples=40, deadline=None, database=None)
    @given(st.integers(0, len(GLOBALS) - 1), st.integers(0, len(TAILS) - 1), st.integers(1, 4),
           st.integers(1, 4), st.lists(st.integers(0, 12), min_size=4, max_size=4))
    def check(g, t, w, w2, steps):
        make, tail = GLOBALS[g], TAILS[t]
        consumed, states = [], []
        for i in range(w):
            it = elastic.worker_iterator(make(), w, i, tail=tail)
            consumed.extend(e for _, e in zip(range(steps[i]), it))
            states.append(checkpoint.serialize(it.get_state()))
            it.close()
        gstate = elastic.merge_states(states, make(), tail=tail)
        order = [int(x) for x in make()]
        if tail is TAILS[2]:
            order = [int(square(x)) for x in order]
        remaining = [order[p] for p in elastic.remaining_positions(gstate, len(order))]
        got = [[int(e) for e in elastic.worker_iterator(make(), w2, j, gstate, tail)] for j in range(w2)]
        assert got == [remaining[j::w2] for j in range(w2)]
        assert sorted([int(c) for c in consumed] + sum(got, [])) == sorted(order)

    check()


def test_workers_made_with_plain_shard_can_be_merged():
    consumed = []
    states = []
    for i in range(2):
        it = iter(global_ds().shard(2, i).batch(2))
        consumed.extend(rows(next(it)))
        states.append(it.get_state())
    gstate = elastic.merge_states(states, global_ds(), tail=lambda d: d.batch(2))
    assert finish_job(global_ds, 3, gstate) == expected_split(global_ds, consumed, 3, gstate)


# ------------------------------------------------------------------------------------------ executor choice
def offset_pair(x):
    return int(x) * 10 + 1  # (a call: not proven elementwise, so the map stays per element and is probed)


def test_tail_whose_map_executor_autotune_chose_processes_counts_its_held_rows(monkeypatch):
    """The tail's fused map+batch runs in worker processes (the probe says so, whatever the machine): its
    state has the executor chooser's layout, and merge_states still counts exactly what it holds."""
    from jaxfeed.pipeline import AUTOTUNE, Options
    from jaxfeed.pipeline.engine.executor_choice import Measurement
    from jaxfeed.pipeline.iterators import chosen_map

    clock = iter(i * 1e-3 for i in range(1, 10**9))
    monkeypatch.setattr(chosen_map._Chooser, "clock", staticmethod(lambda: next(clock)))
    monkeypatch.setattr(chosen_map._Chooser, "cpu_clock", staticmethod(lambda: next(clock)))
    monkeypatch.setattr(chosen_map._Chooser, "process_clock", staticmethod(lambda: 0.0))  # no other threads
    holds_the_gil = Measurement(100, 2, wall=1.0 / 0.97, cpu=1.0, transfer=1e-6)

    def probe(run, elements, position, solo, clock, cpu_clock):
        half = (len(elements) + 1) // 2
        return run(elements[:half], position)[0] + run(elements[half:], position + half)[0], holds_the_gil

    monkeypatch.setattr(chosen_map._Chooser, "probe", staticmethod(probe))

    def make():
        options = Options()
        options.autotune.cpu_budget = 2
        return Dataset.range(80).with_options(options)

    def tail(d):
        return d.map(offset_pair, num_parallel_calls=AUTOTUNE).batch(4)

    consumed, states = run_job(make, 2, [3, 5], tail=tail)
    assert "process" in [s["root"].get("executor") for s in map(checkpoint.deserialize, states)]
    gstate = elastic.merge_states(states, make(), tail=tail)
    got = finish_job(make, 3, gstate, tail=tail)
    assert sorted(consumed + sum(got, [])) == [x * 10 + 1 for x in range(80)]
