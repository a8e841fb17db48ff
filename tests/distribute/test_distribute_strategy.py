"""MirroredStrategy on 1, 3 and 8 forced CPU devices: contexts, run, all_reduce, reduce, variables."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfeed import distribute as jd
from jaxfeed.distribute import ReduceOp, VariableAggregation


@pytest.fixture(scope="module")
def s8():
    return jd.MirroredStrategy()


@pytest.fixture(scope="module")
def s3():
    return jd.MirroredStrategy(["cpu:0", "cpu:1", "cpu:2"])


@pytest.fixture(scope="module")
def s1():
    return jd.MirroredStrategy(["cpu:0"])


def per_replica(strategy, rows):
    """A PerReplica whose replica i holds ``rows[i]`` (same shapes)."""
    return strategy.experimental_distribute_values_from_function(
        lambda ctx: np.asarray(rows[ctx.replica_id_in_sync_group], np.float32))


# ------------------------------------------------------------------ construction
def test_default_devices_are_every_local_device(s8):
    assert s8.num_replicas_in_sync == 8 == len(jax.devices())
    assert s8.extended.worker_devices == tuple(jax.devices())


def test_device_strings_and_jax_devices_both_work():
    a = jd.MirroredStrategy(["/cpu:1", "cpu:2"])
    b = jd.MirroredStrategy(jax.devices()[1:3])
    assert a.extended.worker_devices == b.extended.worker_devices == tuple(jax.devices()[1:3])


def test_unknown_device_string_is_a_clear_error():
    with pytest.raises(ValueError, match="'gpu:0' does not exist"):
        jd.MirroredStrategy(["gpu:0"])
    with pytest.raises(ValueError, match="cannot parse device string 'banana'"):
        jd.MirroredStrategy(["banana"])


# ------------------------------------------------------------------ contexts
def test_outside_any_scope_the_default_strategy_applies():
    assert not jd.has_strategy()
    assert jd.get_strategy().num_replicas_in_sync == 1
    assert not jd.in_cross_replica_context()
    assert jd.get_replica_context().replica_id_in_sync_group == 0


def test_scope_makes_the_strategy_current_and_cross_replica(s3):
    with s3.scope():
        assert jd.get_strategy() is s3 and jd.has_strategy()
        assert jd.in_cross_replica_context() and jd.get_replica_context() is None
    assert not jd.has_strategy()


def test_nested_scopes_of_different_strategies_are_rejected(s3, s1):
    with s3.scope():
        with pytest.raises(ValueError, match="Mixing different strategies"):
            with s1.scope():
                pass


def test_replica_context_calls_outside_run_are_errors(s3):
    ctx = jd.get_replica_context()
    with pytest.raises(RuntimeError, match="inside the function given to strategy.run"):
        jd.ReplicaContext(s3, 0).all_reduce("SUM", 1.0)
    assert ctx.all_reduce("SUM", 2.0) == 2.0  # the default replica context reduces over one replica


# ------------------------------------------------------------------ run
def test_run_gives_each_replica_its_id_and_count(s3):
    def fn():
        ctx = jd.get_replica_context()
        return ctx.replica_id_in_sync_group, jnp.int32(ctx.num_replicas_in_sync)

    ids, counts = s3.run(fn)
    assert [int(x) for x in s3.experimental_local_results(ids)] == [0, 1, 2]
    assert [int(x) for x in s3.experimental_local_results(counts)] == [3, 3, 3]


def test_run_splits_distributed_values_and_broadcasts_plain_ones(s3):
    pr = per_replica(s3, [[1.0], [2.0], [3.0]])
    out = s3.run(lambda x, y: x * y, args=(pr, np.float32(10)))
    assert [float(v[0]) for v in s3.experimental_local_results(out)] == [10.0, 20.0, 30.0]


def test_run_with_one_replica_returns_plain_values(s1):
    out = s1.run(lambda x: x + 1, args=(jnp.ones(2),))
    assert isinstance(out, jax.Array) and out.tolist() == [2.0, 2.0]


def test_all_reduce_sum_and_mean_reach_every_replica(s3):
    pr = per_replica(s3, [[1.0], [2.0], [3.0]])

    def fn(x):
        ctx = jd.get_replica_context()
        return ctx.all_reduce(ReduceOp.SUM, x), ctx.all_reduce("MEAN", {"a": x})["a"]

    total, mean = s3.run(fn, args=(pr,))
    assert [float(v[0]) for v in s3.experimental_local_results(total)] == [6.0] * 3
    assert [float(v[0]) for v in s3.experimental_local_results(mean)] == [2.0] * 3


def test_all_gather_concatenates_in_replica_order(s3):
    pr = per_replica(s3, [[1.0], [2.0], [3.0]])
    out = s3.run(lambda x: jd.get_replica_context().all_gather(x, axis=0), args=(pr,))
    assert s3.experimental_local_results(out)[2].tolist() == [1.0, 2.0, 3.0]


def test_merge_call_runs_once_in_cross_replica_context(s3):
    pr = per_replica(s3, [[1.0], [2.0], [3.0]])

    def merge(strategy, v):
        assert jd.in_cross_replica_context()
        return strategy.reduce(ReduceOp.SUM, v, axis=None)

    out = s3.run(lambda x: jd.get_replica_context().merge_call(merge, args=(x,)), args=(pr,))
    assert [float(v[0]) for v in s3.experimental_local_results(out)] == [6.0] * 3


def test_run_compiles_once_per_input_structure(s8):
    def step(x):
        return jd.get_replica_context().all_reduce("SUM", x)

    before = s8.trace_count
    for i in range(5):
        s8.run(step, args=(per_replica(s8, [[float(i)]] * 8),))
    assert s8.trace_count == before + 1
    s8.run(step, args=(per_replica(s8, [[1.0, 2.0]] * 8),))  # a new shape: one more trace
    assert s8.trace_count == before + 2


def test_run_inside_run_is_an_error(s3):
    with pytest.raises(RuntimeError, match="cannot be called inside strategy.run"):
        s3.run(lambda: s3.run(lambda: 1))


def test_run_rejects_values_of_another_strategy(s3, s8):
    pr = per_replica(s8, [[1.0]] * 8)
    with pytest.raises(ValueError, match="another strategy"):
        s3.run(lambda x: x, args=(pr,))


def test_run_rejects_unhashable_non_array_arguments(s3):
    with pytest.raises(TypeError, match="neither an array nor hashable"):
        s3.run(lambda x: 1.0, args=({"a": object.__new__(_Unhashable)},))


class _Unhashable:
    __hash__ = None


# ------------------------------------------------------------------ reduce
def test_reduce_mean_axis0_divides_by_the_true_example_count(s3):
    from jaxfeed.pipeline import AutoShardPolicy, Dataset, Options

    o = Options()
    o.experimental_distribute.auto_shard_policy = AutoShardPolicy.OFF
    ds = Dataset.from_tensor_slices(np.arange(4, dtype=np.float32)).batch(4).with_options(o)
    step = next(iter(s3.experimental_distribute_dataset(ds)))  # per replica [0,1],[2],[3]
    assert float(s3.reduce("MEAN", step, axis=0)) == 1.5
    assert float(s3.reduce("SUM", step, axis=0)) == 6.0


def test_reduce_axis_none_is_elementwise_across_replicas(s3):
    pr = per_replica(s3, [[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]])
    assert s3.reduce("SUM", pr, axis=None).tolist() == [6.0, 60.0]
    assert s3.reduce("MEAN", pr, axis=None).tolist() == [2.0, 20.0]


def test_reduce_of_a_plain_value_mean_returns_it_and_sum_raises(s3):
    assert s3.reduce("MEAN", 5.0, axis=None) == 5.0
    with pytest.raises(ValueError, match="non-DistributedValues value 5.0 cannot be reduced"):
        s3.reduce("SUM", 5.0, axis=None)


@pytest.mark.parametrize("which", ["s1", "s8"])
def test_reduce_of_a_plain_value_along_an_axis_reduces_each_replicas_broadcast_copy(which, request):
    # tf.distribute: run broadcasts the value, each replica reduces along axis, then the replicas are reduced
    s = request.getfixturevalue(which)
    r = s.num_replicas_in_sync
    v = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_array_equal(np.asarray(s.reduce("SUM", v, axis=0)), r * v.sum(0))
    np.testing.assert_array_equal(np.asarray(s.reduce(ReduceOp.SUM, jnp.asarray(v), axis=1)), r * v.sum(1))
    np.testing.assert_array_equal(np.asarray(s.reduce("SUM", v, axis=(0, 1))), r * v.sum())
    np.testing.assert_allclose(np.asarray(s.reduce("MEAN", v, axis=0)), v.mean(0))
    np.testing.assert_allclose(np.asarray(s.reduce("MEAN", v, axis=-1)), v.mean(-1))
    assert float(s.reduce("MEAN", np.arange(4, dtype=np.int32), axis=0)) == 1.5  # truediv: a float mean
    out = s.reduce("SUM", {"a": v, "b": v[:, 0]}, axis=0)
    np.testing.assert_array_equal(np.asarray(out["b"]), r * v[:, 0].sum())
    with pytest.raises(ValueError, match="out of range for `value` with rank 2"):
        s.reduce("SUM", v, axis=2)
    with pytest.raises(TypeError, match="Expected `axis` to be an integer, tuple or list"):
        s.reduce("MEAN", v, axis="0")
    # axis=None: MEAN returns the value; SUM returns it with one replica and raises with more
    assert s.reduce("MEAN", v, axis=None) is v
    if r == 1:
        assert s.reduce("SUM", v, axis=None) is v
    else:
        with pytest.raises(ValueError, match="cannot be reduced with the given reduce op"):
            s.reduce("SUM", v, axis=None)
        assert s.reduce("SUM", np.zeros(2), axis=None).tolist() == [0.0, 0.0]  # tf's all-zeros exception


def test_reduce_of_a_plain_value_along_an_axis_in_the_default_strategy_is_its_sum_or_mean():
    s = jd.get_strategy()
    assert s.num_replicas_in_sync == 1
    v = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_array_equal(np.asarray(s.reduce("SUM", v, axis=0)), v.sum(0))
    np.testing.assert_allclose(np.asarray(s.reduce("MEAN", v, axis=1)), v.mean(1))
    assert s.reduce("SUM", v, axis=None) is v and s.reduce("MEAN", v, axis=None) is v
    with pytest.raises(ValueError, match="out of range"):
        s.reduce("SUM", v, axis=-3)


def test_reduce_of_a_plain_value_along_an_axis_inside_merge_call_counts_every_replica(s8):
    pr = per_replica(s8, [[1.0, 2.0]] * 8)

    def merge(strategy, x):
        return strategy.reduce("SUM", jnp.ones((2, 3)), axis=0) + strategy.reduce("MEAN", jnp.ones((2, 3)), axis=0)

    out = s8.run(lambda x: jd.get_replica_context().merge_call(merge, args=(x,)), args=(pr,))
    assert np.asarray(s8.experimental_local_results(out)[0]).tolist() == [17.0, 17.0, 17.0]


def test_reduce_with_an_unknown_op_is_a_value_error(s3):
    with pytest.raises(ValueError, match="'MAX' is not a valid ReduceOp"):
        s3.reduce("MAX", per_replica(s3, [[1.0]] * 3), axis=None)


def test_reduce_axis0_is_bitwise_identical_across_replica_counts(s8, s1):
    from jaxfeed.pipeline import Dataset

    data = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
    ds = Dataset.from_tensor_slices(data).batch(64)
    r8 = s8.reduce("MEAN", next(iter(s8.experimental_distribute_dataset(ds, jd.InputOptions(split="balanced")))),
                   axis=0)
    r1 = s1.reduce("MEAN", next(iter(s1.experimental_distribute_dataset(ds))), axis=0)
    assert np.asarray(r8).tobytes() == np.asarray(r1).tobytes()


def test_all_reduce_is_bitwise_reproducible_across_runs(s8):
    data = np.random.default_rng(1).normal(size=(8, 1000)).astype(np.float32)
    pr = s8.experimental_distribute_values_from_function(lambda c: data[c.replica_id_in_sync_group])
    outs = [np.asarray(s8.experimental_local_results(
        s8.run(lambda x: jd.get_replica_context().all_reduce("SUM", x), args=(pr,)))[5]) for _ in range(3)]
    assert outs[0].tobytes() == outs[1].tobytes() == outs[2].tobytes()


# ------------------------------------------------------------------ values
def test_values_from_function_get_a_value_context(s3):
    pr = s3.experimental_distribute_values_from_function(
        lambda ctx: np.array([ctx.replica_id_in_sync_group, ctx.num_replicas_in_sync]))
    assert [v.tolist() for v in s3.experimental_local_results(pr)] == [[0, 3], [1, 3], [2, 3]]


def test_values_from_function_with_mismatched_shapes_is_an_error(s3):
    with pytest.raises(ValueError, match="differ in shape"):
        s3.experimental_distribute_values_from_function(lambda ctx: np.zeros(ctx.replica_id_in_sync_group + 1))


def test_local_results_of_a_plain_value_is_a_one_tuple(s3):
    assert s3.experimental_local_results(7) == (7,)


def test_the_underlying_values_are_sharded_jax_arrays(s8):
    pr = per_replica(s8, [[float(i)] for i in range(8)])
    arr = pr.arrays
    assert isinstance(arr, jax.Array) and arr.shape == (8, 1)
    assert arr.sharding.spec == jax.sharding.PartitionSpec("replica")


def test_make_numpy_dataset_warns_and_slices_on_the_host(s3):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        ds = s3.experimental_make_numpy_dataset(np.arange(6))
    assert any(issubclass(x.category, DeprecationWarning) for x in w)
    assert [int(x) for x in ds] == list(range(6))


# ------------------------------------------------------------------ variables
def test_variable_in_scope_is_mirrored_and_outside_is_plain(s3):
    with s3.scope():
        v = jd.Variable(1.0)
    plain = jd.Variable(1.0)
    assert isinstance(v, jd.MirroredVariable) and type(plain) is jd.Variable
    assert v.read_value().sharding.is_fully_replicated
    assert len(s3.experimental_local_results(v)) == 3


def test_cross_replica_assignments_write_every_copy(s3):
    with s3.scope():
        v = jd.Variable(np.zeros(2, np.float32))
        v.assign([1.0, 2.0])
        v.assign_add([1.0, 1.0])
        v.assign_sub([0.5, 0.5])
    assert v.numpy().tolist() == [1.5, 2.5]


@pytest.mark.parametrize("aggregation, expected", [(VariableAggregation.SUM, 6.0), (VariableAggregation.MEAN, 2.0),
                                                   (VariableAggregation.ONLY_FIRST_REPLICA, 1.0)])
def test_replica_context_updates_follow_the_aggregation(s3, aggregation, expected):
    with s3.scope():
        v = jd.Variable(0.0, aggregation=aggregation)
    pr = s3.experimental_distribute_values_from_function(
        lambda c: np.float32(c.replica_id_in_sync_group + 1))  # deltas 1, 2, 3
    s3.run(lambda d: v.assign_add(d) and None, args=(pr,))
    assert float(v.numpy()) == expected


def test_none_aggregation_with_identical_values_is_fine(s3):
    with s3.scope():
        v = jd.Variable(0.0)
    s3.run(lambda: v.assign(jd.get_replica_context().all_reduce("SUM", 1.0)) and None)
    assert float(v.numpy()) == 3.0


def test_none_aggregation_with_different_values_raises_instead_of_diverging(s3):
    with s3.scope():
        v = jd.Variable(0.0)
    pr = s3.experimental_distribute_values_from_function(lambda c: np.float32(c.replica_id_in_sync_group))
    s3.run(lambda d: v.assign(d) and None, args=(pr,))
    with pytest.raises(ValueError, match="aggregation NONE and was assigned different values"):
        v.numpy()


def test_reads_in_run_see_earlier_assignments_of_the_same_step(s3):
    with s3.scope():
        v = jd.Variable(1.0, aggregation=VariableAggregation.MEAN)

    def fn():
        v.assign_add(1.0)
        return v.read_value() * 10

    out = s3.run(fn)
    assert float(s3.experimental_local_results(out)[0]) == 20.0 and float(v.numpy()) == 2.0


def test_variables_cannot_be_created_inside_run(s3):
    with s3.scope():
        with pytest.raises(RuntimeError, match="cannot be created inside strategy.run"):
            s3.run(lambda: jd.Variable(1.0))


def test_assigning_a_variable_shape_mismatch_names_the_variable(s3):
    with s3.scope():
        v = jd.Variable(np.zeros(3, np.float32), name="w")
        with pytest.raises(ValueError, match=r"variable 'w': shape \(2,\) does not match"):
            v.assign(np.zeros(2))


def test_synchronization_none_under_a_strategy_is_a_value_error(s3):
    with s3.scope():
        with pytest.raises(ValueError, match="`NONE` variable synchronization"):
            jd.Variable(1.0, synchronization=jd.VariableSynchronization.NONE)


# ------------------------------------------------------------------ TPU-style logical devices
def test_logical_device_annotations_become_sharding_constraints_on_the_logical_axis():
    s = jd.MirroredStrategy(num_logical_devices=2)
    assert s.num_replicas_in_sync == 4 and dict(s.mesh.shape) == {"replica": 4, "logical": 2}

    def fn(x):
        split = s.experimental_split_to_logical_devices(x, [1, 2])
        whole = s.experimental_replicate_to_logical_devices(x)
        return jnp.sum(split * 2.0) + jnp.sum(whole)

    pr = s.experimental_distribute_values_from_function(lambda c: np.ones((4, 6), np.float32))
    out = s.run(fn, args=(pr,))
    assert [float(v) for v in s.experimental_local_results(out)] == [72.0] * 4
    (compiled, _), = s._cache.values()
    hlo = compiled.lower((), tuple(pr._leaves)).as_text()
    assert '<@mesh, [{}, {"logical"}]>' in hlo  # dimension 1 split over the logical devices
    assert "<@mesh, [{}, {}]>" in hlo  # replicated over them


def test_split_to_logical_devices_checks_the_partition(s3):
    s = jd.MirroredStrategy(num_logical_devices=2)
    pr = s.experimental_distribute_values_from_function(lambda c: np.ones((4, 6), np.float32))
    with pytest.raises(ValueError, match="product must equal the number of logical devices"):
        s.run(lambda x: s.experimental_split_to_logical_devices(x, [1, 4]), args=(pr,))


def test_logical_annotations_need_a_logical_strategy(s3):
    with pytest.raises(ValueError, match="num_logical_devices > 1"):
        s3.run(lambda: s3.experimental_replicate_to_logical_devices(jnp.ones(2)))


# ------------------------------------------------------------------ the default strategy
def test_default_strategy_runs_functions_directly_and_passes_datasets_through():
    from jaxfeed.pipeline import Dataset

    s = jd.get_strategy()
    assert s.run(lambda x: x + 1, args=(1,)) == 2
    ds = Dataset.range(3)
    assert s.experimental_distribute_dataset(ds) is ds
    assert s.reduce("SUM", 5.0, axis=None) == 5.0
    assert s.experimental_local_results(4) == (4,)


def test_local_results_of_a_nest_is_a_tuple_of_nests(s3):
    out = s3.run(lambda: {"id": jd.get_replica_context().replica_id_in_sync_group, "one": jnp.float32(1)})
    results = s3.experimental_local_results(out)
    assert [int(r["id"]) for r in results] == [0, 1, 2] and all(float(r["one"]) == 1.0 for r in results)


# ------------------------------------------------------------------ sync-on-read variables
def on_read(s, aggregation):
    with s.scope():
        return jd.Variable(0.0, synchronization=jd.VariableSynchronization.ON_READ, aggregation=aggregation)


def test_on_read_variable_keeps_one_value_per_replica_and_sums_on_read(s3):
    v = on_read(s3, VariableAggregation.SUM)
    assert isinstance(v, jd.SyncOnReadVariable) and not v.trainable
    pr = s3.experimental_distribute_values_from_function(lambda c: np.float32(c.replica_id_in_sync_group + 1))
    s3.run(lambda d: v.assign_add(d) and None, args=(pr,))
    assert [float(x) for x in s3.experimental_local_results(v)] == [1.0, 2.0, 3.0]
    assert float(v.numpy()) == 6.0


def test_on_read_mean_aggregation_averages_the_copies(s3):
    v = on_read(s3, VariableAggregation.MEAN)
    pr = s3.experimental_distribute_values_from_function(lambda c: np.float32(c.replica_id_in_sync_group + 1))
    s3.run(lambda d: v.assign(d) and None, args=(pr,))
    assert float(v.numpy()) == 2.0


def test_on_read_cross_replica_assign_splits_a_sum_over_the_copies(s3):
    v = on_read(s3, VariableAggregation.SUM)
    v.assign(6.0)
    assert [float(x) for x in s3.experimental_local_results(v)] == [2.0, 2.0, 2.0] and float(v.numpy()) == 6.0


def test_on_read_with_no_aggregation_cannot_be_read_across_replicas(s3):
    v = on_read(s3, VariableAggregation.NONE)
    with pytest.raises(ValueError, match="aggregation NONE: its per-replica values cannot be read"):
        v.numpy()
