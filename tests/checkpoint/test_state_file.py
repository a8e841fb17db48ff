"""The iterator state file: what it holds, how it round-trips, and how bad files are refused."""

import collections
import logging
import os
import struct

import numpy as np
import pytest

from jaxfeed.pipeline import Dataset, ExternalStatePolicy, Options, checkpoint, errors
from jaxfeed.pipeline.checkpoint import compatibility
from jaxfeed.pipeline.engine.blocks import Failure
from jaxfeed.pipeline.testing import assert_elements_equal, to_python

Point = collections.namedtuple("Point", "x y")


def roundtrip(value):
    return checkpoint.deserialize(checkpoint.serialize(value))


def same(a, b):
    """Equal values of equal types, recursively (numpy leaves by dtype, shape and bytes)."""
    assert type(a) is type(b), (a, b)
    if isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            same(x, y)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            same(a[k], b[k])
    elif isinstance(a, (np.ndarray, np.generic)):
        assert to_python(a) == to_python(b)
    else:
        assert a == b


# ------------------------------------------------------------------------------------------ values
@pytest.mark.parametrize("value", [
    None, True, 0, -7, 2**80, 1.5, float("inf"), "text", b"\x00bytes", [1, [2, 3]], (1, (2,)), {"a": 1},
    [b"record %d" % i for i in range(12)] + [b""],
    {1: "int key", (2, 3): "tuple key"}, {"$t": "a user key named like the tag"},
    np.int64(5), np.float32(0.25), np.bool_(True), np.arange(6, dtype=np.int16).reshape(2, 3),
    np.array(3.0), np.array([b"a", b"bc"], dtype=object), np.array(["uni", "code"]), np.zeros((0, 4)),
    Point(np.int32(1), b"y"),
], ids=repr)
def test_value_roundtrips_with_its_type(value):
    same(roundtrip(value), value)


def test_list_of_same_structure_elements_is_stored_stacked_and_restored_exactly():
    elements = [(np.full(3, i, np.float32), {"label": np.int64(i), "mask": np.array(i % 2 == 0)})
                for i in range(100)]
    same(roundtrip(elements), elements)
    one_by_one = sum(len(checkpoint.serialize([e])) for e in elements)
    assert len(checkpoint.serialize(elements)) < one_by_one / 5


def test_list_of_mixed_elements_roundtrips():
    mixed = [np.int64(1)] * 8 + [np.int32(2), (np.int64(3),)]
    same(roundtrip(mixed), mixed)


def test_namedtuple_of_an_imported_module_comes_back_as_that_class():
    assert type(roundtrip(Point(1, 2))) is Point


def test_namedtuple_of_an_unimported_module_comes_back_with_its_name_and_fields_without_importing():
    Far = collections.namedtuple("Far", "x y")
    Far.__module__ = "not_imported_module_xyz"
    value = roundtrip(Far(1, 2))
    assert type(value).__name__ == "Far" and value._fields == ("x", "y") and tuple(value) == (1, 2)
    assert "not_imported_module_xyz" not in __import__("sys").modules


def test_failure_keeps_a_jaxfeed_error_class_and_message():
    f = roundtrip([Failure(errors.DataLossError("bad record at offset 12", "TFRecord"))])[0]
    assert type(f) is Failure and type(f.error) is errors.DataLossError and "offset 12" in str(f.error)


def test_failure_keeps_a_builtin_error_class_and_notes():
    err = ValueError("negative")
    errors.add_note(err, "jaxfeed: raised in user function of Map at input element 4")
    f = roundtrip(Failure(err))
    assert type(f.error) is ValueError and str(f.error) == "negative"
    assert f.error.__notes__ == err.__notes__


def test_failure_of_a_user_error_class_becomes_unknown_error_naming_it():
    class MyError(Exception):
        pass

    f = roundtrip(Failure(MyError("boom")))
    assert isinstance(f.error, errors.UnknownError) and "MyError: boom" in str(f.error)


def test_object_that_is_not_state_is_refused_naming_where_it_is():
    with pytest.raises(errors.InvalidArgumentError, match=r"state\['root'\]\['buffer'\]\[1\].*object"):
        checkpoint.serialize({"root": {"buffer": [1, object()]}})


# ------------------------------------------------------------------------------------------ bad files
def test_data_that_is_not_a_state_is_invalid_argument():
    with pytest.raises(errors.InvalidArgumentError, match="not a jaxfeed iterator state"):
        checkpoint.deserialize(b'{"json": "not a state"}')


def test_empty_data_is_invalid_argument():
    with pytest.raises(errors.InvalidArgumentError, match="empty"):
        checkpoint.deserialize(b"")


@pytest.mark.parametrize("cut", [1, 16, 100])
def test_truncated_state_is_data_loss(cut):
    data = checkpoint.serialize({"pos": np.arange(50)})
    with pytest.raises(errors.DataLossError, match="truncated"):
        checkpoint.deserialize(data[:-cut])


def test_flipped_byte_is_data_loss():
    data = bytearray(checkpoint.serialize({"pos": np.arange(50)}))
    data[len(data) // 2] ^= 0xFF
    with pytest.raises(errors.DataLossError, match="checksum"):
        checkpoint.deserialize(bytes(data))


def test_unknown_format_version_is_invalid_argument():
    data = bytearray(checkpoint.serialize({"pos": 1}))
    struct.pack_into("<I", data, 8, 99)
    with pytest.raises(errors.InvalidArgumentError, match="format version 99"):
        checkpoint.deserialize(bytes(data))


def test_unknown_iterator_state_version_is_invalid_argument():
    it = iter(Dataset.range(3))
    state = it.get_state()
    state["version"] = 99
    with pytest.raises(errors.InvalidArgumentError, match="version 99"):
        Dataset.range(3).make_iterator(state=checkpoint.serialize(state))


def test_state_of_another_pipeline_names_the_first_differing_node():
    it = iter(Dataset.range(10).map(lambda x: x + 1).batch(2))
    data = checkpoint.serialize(it.get_state())
    other = Dataset.range(10).map(lambda x: x + 1).batch(3)
    with pytest.raises(errors.FailedPreconditionError, match=r"node 2 .*Batch\(batch_size=2.*vs now Batch\(batch_size=3"):
        other.make_iterator(state=data)


def test_state_of_a_longer_pipeline_says_where_they_part():
    state = iter(Dataset.range(10).take(3)).get_state()
    with pytest.raises(errors.FailedPreconditionError, match="saved Take"):
        Dataset.range(10).make_iterator(state=state)


# ------------------------------------------------------------------------------------------ iterators
def test_iterator_starts_from_serialized_bytes():
    ds = Dataset.range(10).batch(3)
    it = iter(ds)
    next(it)
    assert_elements_equal(Dataset.range(10).batch(3).make_iterator(state=checkpoint.serialize(it.get_state())),
                          list(it))


def test_failure_pending_in_a_parallel_map_is_raised_after_restore_in_its_place():
    def f(x):
        if x == 5:
            raise ValueError("five")
        return x

    def make():
        return Dataset.range(12).map(f, num_parallel_calls=2)

    it = iter(make())
    assert [int(next(it)) for _ in range(3)] == [0, 1, 2]
    restored = make().make_iterator(state=checkpoint.serialize(it.get_state()))
    assert [int(next(restored)) for _ in range(2)] == [3, 4]
    with pytest.raises(ValueError, match="five"):
        next(restored)
    assert [int(x) for x in restored] == [6, 7, 8, 9, 10, 11]


def test_save_and_restore_through_a_local_path(tmp_path):
    it = iter(Dataset.range(20).shuffle(5, seed=1))
    head = [next(it) for _ in range(7)]
    path = str(tmp_path / "run" / "it.state")
    checkpoint.save(it, path)
    restored = checkpoint.restore(Dataset.range(20).shuffle(5, seed=1), path)
    assert_elements_equal(head + list(restored), list(Dataset.range(20).shuffle(5, seed=1)))


def test_save_leaves_no_temporary_file(tmp_path):
    checkpoint.save(iter(Dataset.range(3)), str(tmp_path / "it.state"))
    assert os.listdir(tmp_path) == ["it.state"]


def test_save_through_an_fsspec_url():
    it = iter(Dataset.range(9).batch(2))
    next(it)
    checkpoint.save(it, "memory://jaxfeed-test/it.state")
    assert_elements_equal(checkpoint.restore(Dataset.range(9).batch(2), "memory://jaxfeed-test/it.state"), list(it))


def test_restore_of_a_missing_file_is_not_found(tmp_path):
    with pytest.raises(errors.NotFoundError, match="No iterator state"):
        checkpoint.restore(Dataset.range(3), str(tmp_path / "missing.state"))


# ------------------------------------------------------------------------------------------ manager
def test_manager_restores_the_latest_step(tmp_path):
    mgr = checkpoint.CheckpointManager(str(tmp_path))
    it = iter(Dataset.range(10))
    for step in (100, 200):
        next(it)
        mgr.save(step, it)
    assert mgr.latest_step() == 200
    assert [int(x) for x in mgr.restore(200, Dataset.range(10))] == list(range(2, 10))


def test_manager_with_nothing_saved_has_no_latest_step(tmp_path):
    assert checkpoint.CheckpointManager(str(tmp_path / "none")).latest_step() is None


def test_manager_keeps_max_to_keep_steps_and_never_deletes_model_files(tmp_path):
    mgr = checkpoint.CheckpointManager(str(tmp_path), max_to_keep=2)
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "model.msgpack").write_bytes(b"weights")
    it = iter(Dataset.range(10))
    for step in (1, 2, 3):
        mgr.save(step, it)
    assert mgr.all_steps() == [2, 3]
    assert os.listdir(tmp_path / "1") == ["model.msgpack"]


def test_manager_keeps_one_file_per_worker(tmp_path):
    mgr = checkpoint.CheckpointManager(str(tmp_path))
    for w in range(2):
        it = iter(Dataset.range(10).shard(2, w))
        next(it)
        mgr.save(5, it, worker=w)
    assert [int(x) for x in mgr.restore(5, Dataset.range(10).shard(2, 1), worker=1)] == [3, 5, 7, 9]


def test_orbax_step_directory_layout_is_shared_when_orbax_is_installed(tmp_path):
    pytest.importorskip("orbax.checkpoint")
    mgr = checkpoint.CheckpointManager(str(tmp_path))
    assert mgr.path(7).startswith(f"{tmp_path}/7/")


# ------------------------------------------------------------------------------------------ external state
def stateful_ds(policy=None):
    ds = Dataset.range(5).map(lambda x: x, stateful=True)
    if policy is not None:
        opts = Options()
        opts.experimental_external_state_policy = policy
        ds = ds.with_options(opts)
    return ds


@pytest.fixture(autouse=True)
def _fresh_warnings():
    compatibility._warned.clear()
    yield


def test_external_state_policy_fail_refuses_to_save_naming_the_node():
    with pytest.raises(errors.FailedPreconditionError, match=r"Map\(.*is stateful"):
        iter(stateful_ds(ExternalStatePolicy.FAIL)).get_state()


def test_external_state_policy_warn_logs_and_saves(caplog):
    with caplog.at_level(logging.WARNING, logger="jaxfeed"):
        state = iter(stateful_ds(ExternalStatePolicy.WARN)).get_state()
    assert "external state" in caplog.text and state["root"] is not None


def test_external_state_policy_ignore_saves_silently(caplog):
    with caplog.at_level(logging.WARNING, logger="jaxfeed"):
        iter(stateful_ds(ExternalStatePolicy.IGNORE)).get_state()
    assert "external state" not in caplog.text


def test_external_state_policy_unset_refuses_as_tf_data_does():
    # issue 14 defect 7: unset used to mean WARN, so a stateful map resumed with other data after one log line
    with pytest.raises(errors.FailedPreconditionError, match=r"Map\(.*is stateful.*Refusing to save"):
        iter(stateful_ds()).get_state()


def squares(n=6):
    return lambda: (i * i for i in range(n))


def generator_ds(policy=None, **kwargs):
    ds = Dataset.from_generator(squares(), output_types=np.int64, **kwargs)
    if policy is not None:
        opts = Options()
        opts.experimental_external_state_policy = policy
        ds = ds.with_options(opts)
    return ds


def test_generator_refuses_to_save_by_default_naming_the_node_and_the_opt_ins():
    # issue 14 defect 7: before, saved after a log line; a non-replayable generator then resumed elsewhere
    it = iter(generator_ds())
    next(it)
    with pytest.raises(errors.FailedPreconditionError, match=r"Generator\(.*replayable=True.*WARN or IGNORE"):
        it.get_state()


def test_generator_declared_replayable_saves_and_resumes_exactly():
    it = iter(generator_ds(replayable=True))
    next(it), next(it)
    state = checkpoint.serialize(it.get_state())
    assert [int(x) for x in generator_ds(replayable=True).make_iterator(state=state)] == [4, 9, 16, 25]


def test_generator_saves_by_replay_under_the_warn_policy(caplog):
    it = iter(generator_ds(ExternalStatePolicy.WARN))
    next(it)
    with caplog.at_level(logging.WARNING, logger="jaxfeed"):
        state = it.get_state()
    assert "external state" in caplog.text
    assert [int(x) for x in generator_ds(ExternalStatePolicy.WARN).make_iterator(state=state)] == [1, 4, 9, 16, 25]


def test_generator_made_inside_flat_map_refuses_to_save_by_default():
    it = iter(Dataset.range(2).flat_map(lambda _: Dataset.from_generator(squares(3), output_types=np.int64)))
    next(it)
    with pytest.raises(errors.FailedPreconditionError, match="Generator is stateful"):
        it.get_state()


def test_replayable_must_be_a_bool():
    with pytest.raises(TypeError, match="replayable"):
        Dataset.from_generator(squares(), output_types=np.int64, replayable="yes")


def test_pipeline_without_hidden_state_saves_without_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="jaxfeed"):
        iter(Dataset.range(5).map(lambda x: x)).get_state()
    assert "external state" not in caplog.text


def test_external_state_warning_is_logged_once_per_pipeline(caplog):
    it = iter(stateful_ds(ExternalStatePolicy.WARN))
    with caplog.at_level(logging.WARNING, logger="jaxfeed"):
        it.get_state()
        it.get_state()
    assert caplog.text.count("external state") == 1


def test_state_that_does_not_fit_an_iterator_names_the_node():
    it = iter(Dataset.range(10).shuffle(4, seed=1).batch(2))
    next(it)
    state = it.get_state()
    del state["root"]["input"]["draw_from"]  # e.g. written by another jaxfeed version
    with pytest.raises(errors.InvalidArgumentError, match=r"saved state of Shuffle\(buffer_size=4.*'draw_from'"):
        Dataset.range(10).shuffle(4, seed=1).batch(2).make_iterator(state=checkpoint.serialize(state))
