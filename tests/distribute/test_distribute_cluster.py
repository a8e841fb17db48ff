"""TF_CONFIG parsing and the cluster resolver; tasks outside the collective group (no processes started)."""

import json

import pytest

from jaxfeed import distribute as jd
from jaxfeed.distribute.cluster import TFConfigClusterResolver, parse_tf_config

CLUSTER = {"chief": ["127.0.0.1:1000"], "worker": ["127.0.0.1:1001", "127.0.0.1:1002"], "ps": ["127.0.0.1:1003"]}


def config(task_type, index, cluster=CLUSTER):
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


def test_resolver_reads_task_type_id_and_cluster_spec(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", config("worker", 1))
    r = TFConfigClusterResolver()
    assert (r.task_type, r.task_id) == ("worker", 1)
    assert r.cluster_spec().as_dict() == CLUSTER
    assert r.master() == "127.0.0.1:1002"


def test_collective_group_is_chief_then_workers_and_the_first_coordinates():
    r = TFConfigClusterResolver(tf_config=config("worker", 0))
    assert r.collective_tasks() == [("chief", 0), ("worker", 0), ("worker", 1)]
    assert r.process_id() == 1 and r.coordinator_address() == "127.0.0.1:1000"


def test_without_a_chief_the_first_worker_coordinates():
    r = TFConfigClusterResolver(tf_config=config("worker", 1, {"worker": ["h:1", "h:2"]}))
    assert r.process_id() == 1 and r.coordinator_address() == "h:1"


def test_bad_json_is_quoted():
    with pytest.raises(ValueError, match=r"TF_CONFIG is not valid JSON .*'\{cluster: oops'"):
        parse_tf_config("{cluster: oops")


def test_index_out_of_range_is_quoted():
    with pytest.raises(ValueError, match=r"index 5 is out of range for type 'worker', which has 2 task"):
        parse_tf_config(config("worker", 5))


def test_unknown_task_type_is_quoted():
    with pytest.raises(ValueError, match=r"unknown type 'master'"):
        parse_tf_config(config("master", 0))
    with pytest.raises(ValueError, match=r"'cluster' has unknown task type 'trainer'"):
        parse_tf_config(json.dumps({"cluster": {"trainer": ["h:1"]}, "task": {"type": "trainer", "index": 0}}))


def test_bad_address_list_is_quoted():
    with pytest.raises(ValueError, match=r"'cluster'.worker must be a list of 'host:port' strings, got 'h:1'"):
        parse_tf_config(json.dumps({"cluster": {"worker": "h:1"}, "task": {"type": "worker", "index": 0}}))


def test_no_tf_config_means_a_single_worker(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    r = TFConfigClusterResolver()
    assert r.task_type is None and not r.cluster_spec()


@pytest.mark.parametrize("task_type", ["ps", "evaluator"])
def test_ps_and_evaluator_tasks_are_outside_the_group_and_collectives_raise(monkeypatch, task_type):
    monkeypatch.setenv("TF_CONFIG", config(task_type, 0))
    s = jd.MultiWorkerMirroredStrategy()
    assert s.cluster_resolver.task_type == task_type
    with pytest.raises(RuntimeError, match=f"task {task_type}:0 is not part of the collective group"):
        s.run(lambda: 1)
    with pytest.raises(RuntimeError, match="not part of the collective group"):
        s.reduce("SUM", 1.0, axis=None)
    with pytest.raises(RuntimeError, match="not part of the collective group"):
        with s.scope():
            pass


def test_single_worker_multi_worker_strategy_uses_the_local_devices(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", config("worker", 0, {"worker": ["127.0.0.1:1"]}))
    s = jd.MultiWorkerMirroredStrategy()
    assert s.num_replicas_in_sync == 8
    if s.cluster_resolver.task_type == "worker":  # the tf.distribute idiom works
        assert s.cluster_resolver.task_id == 0
