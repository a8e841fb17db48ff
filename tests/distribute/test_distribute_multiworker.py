"""MultiWorkerMirroredStrategy with real worker processes on 127.0.0.1 (2 CPU devices each)."""

import json
import os
import socket
import subprocess
import sys

import local_cluster
import pytest
from local_cluster import assert_ok, describe, free_ports

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TASK = os.path.join(HERE, "multiworker_task.py")
TIMEOUTS = {"initialization_timeout": 10, "heartbeat_timeout": 8, "step_timeout": 6}

pytestmark = pytest.mark.multiprocess


def launch(tmp_path, mode, n, start=None, extra=(), chief=False, timeout=120, **timeouts):
    """Start ``start`` (default n) of the n tasks running ``multiworker_task.py MODE OUT *extra``; their results.
    ``timeouts`` replace some of ``TIMEOUTS`` (a test that waits for one to expire shortens it)."""
    return local_cluster.launch(tmp_path, mode, n, lambda out: [TASK, mode, str(out), *extra], start=start,
                                chief=chief, timeout=timeout,
                                env={"JAXFEED_TEST_TIMEOUTS": json.dumps({**TIMEOUTS, **timeouts})})


def single_process_reference(tmp_path, devices):
    out = tmp_path / "ref.json"
    env = dict(os.environ)
    env.pop("TF_CONFIG", None)
    env.pop("XLA_FLAGS", None)
    p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "train_mlp.py"), "--devices", str(devices),
                        "--steps", "5", "--out", str(out)], env=env, cwd=ROOT, capture_output=True, timeout=120)
    assert p.returncode == 0, f"train_mlp.py --devices {devices}: rc={p.returncode}\n" + \
        p.stderr.decode(errors="replace")[-6000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("n", [2, pytest.param(3, marks=pytest.mark.slow)])  # (3 workers: -m slow)
def test_workers_end_with_identical_variables_equal_to_a_single_process_run(tmp_path, n):
    results = launch(tmp_path, "train", n)
    assert_ok(results)
    params = [r["result"]["params"] for r in results]
    assert all(p == params[0] for p in params)  # bitwise identical on every worker
    ref = single_process_reference(tmp_path, 2 * n)
    for a, b in zip(results[0]["result"]["losses"], ref["losses"]):
        assert a == pytest.approx(b, rel=1e-5)


def test_reduce_and_all_reduce_cross_processes_and_data_is_split_across_workers(tmp_path):
    results = launch(tmp_path, "reduce", 2)
    assert_ok(results)
    r0, r1 = (r["result"] for r in results)
    assert r0["sum"] == r1["sum"] == 10.0  # replicas 1+2+3+4 over two processes
    assert r0["all_reduce"] == r1["all_reduce"] == [10.0, 10.0]
    # DATA sharding after the legacy split (tf.distribute's rule): pieces alternate between workers
    assert r0["steps"][0] == [[0, 1], [4, 5]] and r1["steps"][0] == [[2, 3], []]
    assert r0["steps"][-1] == [[18], []] and r1["steps"][-1] == [[19], []]
    assert r0["means"] == r1["means"] == [2.5, 8.5, 14.5, 18.5]


def test_every_worker_leaves_the_group_with_jax_distributed_shutdown_before_exiting(tmp_path):
    results = launch(tmp_path, "reduce", 3)
    assert_ok(results)
    assert [r["result"]["sum"] for r in results] == [21.0] * 3  # replicas 1+...+6 over three processes
    for r in results:  # no coordinator exits first and aborts its peers
        assert "left the group: jax.distributed.shutdown() returned" in r["log"], describe(results)


def test_worker_ports_are_distinct_bindable_and_outside_the_ephemeral_range():
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low, high = (int(x) for x in f.read().split())
    if low <= 12000:
        pytest.skip(f"the ephemeral port range starts at {low}: no room below it")
    ports = free_ports(8)
    assert len(set(ports)) == 8
    assert all(not low <= p <= high for p in ports)
    for p in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def test_a_chief_and_a_worker_form_the_group_with_the_chief_first(tmp_path):
    results = launch(tmp_path, "reduce", 2, chief=True)
    assert_ok(results)
    r0, r1 = (r["result"] for r in results)
    assert r0["task"] == ["chief", 0] and r0["process"] == 0 and r1["process"] == 1
    assert r0["sum"] == r1["sum"] == 10.0


def test_a_worker_that_never_arrives_makes_the_others_fail_with_a_timeout(tmp_path):
    results = launch(tmp_path, "reduce", 2, start=1, initialization_timeout=4)  # (it expires: the wait)
    (r0,) = results
    assert r0["result"] and "TimeoutError" in r0["result"].get("error", "") and \
        "worker:1" in r0["result"]["error"], describe(results)


def test_a_worker_that_dies_makes_the_others_fail_with_a_timeout_in_the_input_loop(tmp_path):
    results = launch(tmp_path, "die_after_join", 2, step_timeout=3, heartbeat_timeout=4)  # (they expire: the wait)
    r0, r1 = results
    assert r1["rc"] == 3, describe(results)
    assert r0["result"] and "TimeoutError" in r0["result"].get("error", "") and \
        "worker 1 did not report step" in r0["result"]["error"], describe(results)


def test_a_worker_that_dies_during_run_makes_jax_terminate_the_others(tmp_path):
    results = launch(tmp_path, "die_in_run", 2, heartbeat_timeout=4)  # (it expires: the wait)
    r0, r1 = results
    assert r0["rc"] != 0 and r0["result"] is None, describe(results)
    assert "stopped sending heartbeats" in r0["log"] or "another task died" in r0["log"], describe(results)


def test_file_sharded_training_from_tfrecords_keeps_workers_identical(tmp_path):
    results = launch(tmp_path, "train", 2, extra=["--tfrecord", str(tmp_path / "data")])
    assert_ok(results)
    a, b = (r["result"] for r in results)
    assert a["params"] == b["params"] and a["losses"] == b["losses"]
    assert a["losses"][-1] < a["losses"][0]
