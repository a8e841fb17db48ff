"""Issue 15 (data fidelity): TF training loops port with their data intact.

64-bit values (never narrowed silently), steps regrouped as tf.distribute does (a nest of PerReplica), dict
components under their own keys, ragged last steps (TF's answers from reduce / local results / gather),
strings kept on the host, and the Strategy surface (gather, extended, PerReplicaSpec)."""

import warnings

import jax
import numpy as np
import pytest

from jaxfeed import distribute as jd
from jaxfeed.pipeline import Dataset
from jaxfeed.pipeline.errors import InvalidArgumentError

BIG = np.array([2**40, 2**40 + 1, 5, 6], np.int64)


@pytest.fixture(scope="module")
def s2():
    return jd.MirroredStrategy(["cpu:0", "cpu:1"])


def local(strategy, value):
    return [np.asarray(v).tolist() for v in strategy.experimental_local_results(value)]


def quiet(fn, *args, **kwargs):
    """Call ``fn`` with the narrowing warnings recorded (returned) instead of shown."""
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = fn(*args, **kwargs)
    return out, [str(x.message) for x in w if "are placed on the devices as" in str(x.message)]


# ------------------------------------------------------------------ 1. 64-bit values
def test_int64_that_does_not_fit_raises_naming_the_component_and_the_remedies(s2):
    ds = Dataset.from_tensor_slices({"id": BIG, "x": np.zeros(4, np.float32)}).batch(4)
    for dd in (s2.experimental_distribute_dataset(ds), s2.distribute_datasets_from_function(lambda c: ds)):
        with pytest.raises(InvalidArgumentError, match=r"component \['id'\].*1099511627776.*does not fit in int32"
                                                       r".*jax_enable_x64.*cast") as e:
            next(iter(dd))
        assert isinstance(e.value, ValueError)


def test_64_bit_values_that_do_not_fit_raise_in_values_run_and_reduce(s2):
    with pytest.raises(InvalidArgumentError, match="experimental_distribute_values_from_function: leaf 0.*does not fit"):
        s2.experimental_distribute_values_from_function(lambda c: BIG)
    with pytest.raises(InvalidArgumentError, match="run: argument leaf 0.*does not fit"):
        s2.run(lambda x: x, args=(BIG,))
    with pytest.raises(InvalidArgumentError, match="strategy.reduce.*does not fit"):
        s2.reduce("SUM", BIG, axis=0)
    with pytest.raises(InvalidArgumentError, match="float64 value .* does not fit in float32"):
        s2.run(lambda x: x, args=(np.array([1e300]),))
    ds = Dataset.from_tensor_slices(BIG).batch(2)
    with pytest.raises(InvalidArgumentError, match="does not fit in int32"):
        s2.experimental_distribute_dataset(ds).reduce(0, lambda state, x: state + s2.reduce("SUM", x, axis=0))


def test_64_bit_values_that_fit_are_narrowed_with_one_warning_per_component(s2):
    ds = Dataset.range(12).map(lambda i: (i * 10, np.float64(i) / 4)).batch(4)
    dd = s2.experimental_distribute_dataset(ds)
    assert [s.dtype for s in dd.element_spec] == [np.int32, np.float32]  # the spec says what arrives
    steps, warned = quiet(list, dd)
    assert len(steps) == 3 and len(warned) == 2  # one per component, not one per step
    assert "component [0]" in warned[0] and "int64 values are placed on the devices as int32" in warned[0]
    assert "component [1]" in warned[1] and "float64" in warned[1]
    assert [x.dtype for x in steps[0][0].values] == [np.int32] * 2
    assert sum(local(s2, steps[2][0]), []) == [80, 90, 100, 110]


def test_x64_mode_keeps_64_bit_values_everywhere(s2):
    with jax.enable_x64(True):  # thread-local: the prefetch thread must place steps as this thread would
        dd = s2.experimental_distribute_dataset(Dataset.from_tensor_slices(BIG).batch(4))
        assert dd.element_spec.dtype == np.int64
        ids = next(iter(dd))
        assert local(s2, ids) == [[2**40, 2**40 + 1], [5, 6]]
        x = next(iter(s2.experimental_distribute_dataset(Dataset.from_tensor_slices(np.array([0.1, 0.2])).batch(2))))
        assert local(s2, x)[0] == [0.1]  # float64: not rounded to float32
        out = s2.run(lambda a: a + 1, args=(ids,))
        assert local(s2, out) == [[2**40 + 1, 2**40 + 2], [6, 7]]
        assert int(s2.reduce("SUM", ids, axis=0)) == 2 * 2**40 + 12
        assert int(s2.reduce("SUM", out, axis=0)) == 2 * 2**40 + 16
        pr = s2.experimental_distribute_values_from_function(lambda c: BIG[c.replica_id_in_sync_group])
        assert local(s2, pr) == [2**40, 2**40 + 1]
        from_fn = s2.distribute_datasets_from_function(lambda c: Dataset.from_tensor_slices(BIG).batch(1))
        assert [local(s2, z) for z in from_fn][0] == [[2**40], [2**40 + 1]]
        total = s2.experimental_distribute_dataset(Dataset.from_tensor_slices(BIG).batch(2)).reduce(
            np.int64(0), lambda state, z: state + s2.reduce("SUM", z, axis=0))
        assert int(total) == 2 * 2**40 + 12


# ------------------------------------------------------------------ 2. steps regrouped as tf.distribute
def test_a_features_labels_step_is_a_tuple_of_per_replica_values(s2):
    ds = Dataset.from_tensor_slices((np.arange(8, dtype=np.float32), np.arange(8, dtype=np.int32) % 2)).batch(4)
    dd = s2.experimental_distribute_dataset(ds)
    x, y = next(iter(dd))  # unpacks like TF
    assert isinstance(x, jd.PerReplica) and isinstance(y, jd.PerReplica)
    assert local(s2, x) == [[0.0, 1.0], [2.0, 3.0]] and local(s2, y) == [[0, 1], [0, 1]]
    step = next(iter(dd))
    assert local(s2, step[0]) == local(s2, x)
    for i, (features, labels) in enumerate(dd):
        assert local(s2, labels) == [[0, 1], [0, 1]]
    assert i == 1
    out = s2.run(lambda f, lab: f * 10 + lab, args=step)  # args=batch, as in the TF tutorials
    assert local(s2, out) == [[0.0, 11.0], [20.0, 31.0]]


def test_element_spec_is_the_elements_nest_of_per_replica_specs(s2):
    ds = Dataset.from_tensor_slices((np.zeros((8, 3), np.float32), {"y": np.zeros(8, np.int32)}))
    dd = s2.experimental_distribute_dataset(ds.batch(4, drop_remainder=True))
    spec = dd.element_spec
    assert isinstance(spec, tuple) and isinstance(spec[1], dict)
    assert isinstance(spec[0], jd.PerReplicaSpec) and len(spec[0].value_specs) == 2
    assert spec[0].value_specs[0].shape == (2, 3) and spec[0].shape == (2, 3)
    assert spec[1]["y"].value_specs[1].dtype == np.int32
    assert "PerReplicaSpec(TensorSpec(shape=(2, 3), dtype=float32)" in repr(spec[0])


# ------------------------------------------------------------------ 3. dict components keep their keys
def test_dict_components_whose_keys_are_not_sorted_keep_their_values(s2):
    ds = Dataset.range(4).map(lambda i: {"label": i % 3, "id": i * 100}).batch(4)
    for dd in (s2.experimental_distribute_dataset(ds), s2.distribute_datasets_from_function(
            lambda c: Dataset.range(4).map(lambda i: {"label": i % 3, "id": i * 100}).batch(2))):
        step, _ = quiet(next, iter(dd))
        replicas = s2.experimental_local_results(step)  # one dict per replica
        assert [r["id"].tolist() for r in replicas] == [[0, 100], [200, 300]]
        assert [r["label"].tolist() for r in replicas] == [[0, 1], [2, 0]]
        assert set(step) == {"label", "id"} and local(s2, step["id"]) == [[0, 100], [200, 300]]
        out = s2.run(lambda d: d["id"] + d["label"], args=(step,))
        assert local(s2, out) == [[0, 101], [202, 300]]


# ------------------------------------------------------------------ 4. ragged last steps
def test_ragged_last_step_gives_tfs_answers(s2):
    ds = Dataset.from_tensor_slices(np.arange(121, dtype=np.float32)).batch(128)
    dd = s2.experimental_distribute_dataset(ds)
    (step,) = list(dd)
    assert [len(v) for v in s2.experimental_local_results(step)] == [61, 60]  # TF's per-replica batches
    assert step.arrays.shape == (128,) and step.sizes.tolist() == [61, 60]  # padded to ceil(128 / 2) = 64
    assert float(s2.reduce("SUM", step, axis=0)) == float(np.arange(121).sum())
    assert float(s2.reduce("MEAN", step, axis=0)) == 60.0
    assert float(dd.reduce(np.float32(0), lambda state, x: state + s2.reduce("SUM", x, axis=0))) == 7260.0

    def metric(x):  # the masked-metric idiom: count and sum only the real examples
        ctx = jd.get_replica_context()
        mask = ctx.example_mask(x.shape[0])
        return ctx.all_reduce("SUM", mask.sum()), x * 2

    count, doubled = s2.run(metric, args=(step,))
    assert int(s2.experimental_local_results(count)[0]) == 121
    assert [len(v) for v in s2.experimental_local_results(doubled)] == [61, 60]
    assert float(s2.reduce("SUM", doubled, axis=0)) == 2 * 7260.0


def test_drop_remainder_in_datasets_from_function_drops_the_partial_last_step(s2):
    whole = s2.distribute_datasets_from_function(lambda c: Dataset.range(100).batch(4, drop_remainder=True))
    steps, _ = quiet(list, whole)
    assert len(steps) == 12  # 25 per-replica batches over 2 replicas: TF yields 12 whole steps
    assert all(len(v) == 4 for s in steps for v in s2.experimental_local_results(s))
    partial, _ = quiet(list, s2.distribute_datasets_from_function(lambda c: Dataset.range(100).batch(4)))
    assert len(partial) == 13 and local(s2, partial[-1]) == [[96, 97, 98, 99], []]  # not static: kept, as TF


# ------------------------------------------------------------------ 6. strings stay on the host
def test_string_components_are_host_per_replica_values(s2):
    ds = Dataset.from_tensor_slices({"text": [b"a", b"bb", b"c"], "x": np.arange(3, dtype=np.float32)}).batch(3)
    for options in (None, jd.InputOptions(experimental_fetch_to_device=False)):
        step = next(iter(s2.experimental_distribute_dataset(ds, options)))
        assert isinstance(step["text"], jd.PerReplica) and step["text"].host
        assert [v.tolist() for v in s2.experimental_local_results(step["text"])] == [[b"a", b"bb"], [b"c"]]
        assert s2.gather(step["text"], axis=0).tolist() == [b"a", b"bb", b"c"]
        assert local(s2, s2.run(lambda x: x + 1, args=(step["x"],))) == [[1.0, 2.0], [3.0]]
        with pytest.raises(TypeError, match="string value.*Pass only the numeric components") as e:
            s2.run(lambda d: d["x"], args=(step,))
        assert "experimental_fetch_to_device" not in str(e.value)  # the old advice did not work
    assert s2.experimental_distribute_dataset(ds).element_spec["text"].dtype == object


# ------------------------------------------------------------------ 7. the Strategy surface
def test_gather_concatenates_every_replicas_true_rows(s2):
    step = next(iter(s2.experimental_distribute_dataset(Dataset.from_tensor_slices(
        np.arange(5, dtype=np.float32)).batch(8))))  # ragged: [0,1,2],[3,4] padded to 4 rows each
    assert np.asarray(s2.gather(step, axis=0)).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    pr = s2.experimental_distribute_values_from_function(
        lambda c: np.full((2, 1), c.replica_id_in_sync_group, np.float32))
    assert np.asarray(s2.gather(pr, axis=1)).tolist() == [[0.0, 1.0], [0.0, 1.0]]
    assert s2.gather(7.0, axis=0) == 7.0
    with pytest.raises(RuntimeError, match="all_gather"):
        s2.run(lambda x: s2.gather(x, 0), args=(pr,))


def test_extended_has_the_commonly_used_members(s2):
    e = s2.extended
    assert e.worker_devices == tuple(jax.devices()[:2]) and e.parameter_devices == e.worker_devices
    assert e.experimental_between_graph is False and e.should_checkpoint and e.should_save_summary
    assert e.experimental_require_static_shapes is False and e.experimental_should_init
    pr = s2.experimental_distribute_values_from_function(lambda c: np.float32(c.replica_id_in_sync_group + 1))
    reduced = e.reduce_to("SUM", pr, destinations=None)
    assert float(reduced) == 3.0 and reduced.sharding.is_fully_replicated
    assert [float(x) for x in e.batch_reduce_to("MEAN", [(pr, None), (pr, None)])] == [1.5, 1.5]
    with s2.scope():
        v = jd.Variable(1.0)
    assert e.variable_created_in_scope(v)
    e.update(v, lambda var, d: var.assign_add(d), args=(2.0,))
    assert float(v.numpy()) == 3.0


def test_a_variables_64_bit_initial_value_is_checked_like_every_other_value(s2):
    with s2.scope():
        with pytest.raises(InvalidArgumentError, match="Variable 'ids': the initial value.*does not fit in int32"):
            jd.Variable(BIG, name="ids")
        v, warned = quiet(jd.Variable, np.array([1, 2], np.int64), name="small")
    assert v.numpy().tolist() == [1, 2] and len(warned) == 1
    with jax.enable_x64(True):
        with s2.scope():
            assert jd.Variable(BIG).numpy().tolist() == BIG.tolist()
