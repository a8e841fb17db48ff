"""MultiWorkerMirroredStrategy with real worker processes on 127.0.0.1 (2 CPU devices each)."""

import json
import os
import socket
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TASK = os.path.join(HERE, "multiworker_task.py")
TIMEOUTS = {"initialization_timeout": 10, "heartbeat_timeout": 8, "step_timeout": 6}

pytestmark = pytest.mark.multiprocess


def free_ports(n):
    """n distinct free ports (all held open while choosing, so the OS cannot hand out one twice)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def launch(tmp_path, mode, n, start=None, extra=(), chief=False):
    """Start ``start`` (default n) of the n tasks of a TF_CONFIG cluster (the first one a chief if ``chief``);
    returns their results."""
    ports = free_ports(n)
    addrs = [f"127.0.0.1:{p}" for p in ports]
    cluster = {"chief": addrs[:1], "worker": addrs[1:]} if chief else {"worker": addrs}
    tasks = ([("chief", 0)] + [("worker", i) for i in range(n - 1)]) if chief else [("worker", i) for i in range(n)]
    procs = []
    for i in range(n if start is None else start):
        task = {"type": tasks[i][0], "index": tasks[i][1]}
        env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": task}),
                   JAXFEED_TEST_TIMEOUTS=json.dumps(TIMEOUTS), XLA_FLAGS="--xla_force_host_platform_device_count=2")
        out = tmp_path / f"{mode}_{i}.json"
        procs.append((subprocess.Popen([sys.executable, TASK, mode, str(out), *extra], env=env, cwd=ROOT,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT), out))
    results = []
    for p, out in procs:
        log, _ = p.communicate(timeout=90)
        data = json.loads(out.read_text()) if out.exists() else None
        results.append({"rc": p.returncode, "log": log.decode(errors="replace"), "result": data})
    return results


def single_process_reference(tmp_path, devices):
    out = tmp_path / "ref.json"
    env = dict(os.environ)
    env.pop("TF_CONFIG", None)
    env.pop("XLA_FLAGS", None)
    subprocess.run([sys.executable, os.path.join(ROOT, "examples", "train_mlp.py"), "--devices", str(devices),
                    "--steps", "5", "--out", str(out)], env=env, cwd=ROOT, check=True, capture_output=True, timeout=90)
    return json.loads(out.read_text())


@pytest.mark.parametrize("n", [2, 3])
def test_workers_end_with_identical_variables_equal_to_a_single_process_run(tmp_path, n):
    results = launch(tmp_path, "train", n)
    for r in results:
        assert r["rc"] == 0 and r["result"] and "error" not in r["result"], r["log"][-2000:]
    params = [r["result"]["params"] for r in results]
    assert all(p == params[0] for p in params)  # bitwise identical on every worker
    ref = single_process_reference(tmp_path, 2 * n)
    for a, b in zip(results[0]["result"]["losses"], ref["losses"]):
        assert a == pytest.approx(b, rel=1e-5)


def test_reduce_and_all_reduce_cross_processes_and_data_is_split_across_workers(tmp_path):
    results = launch(tmp_path, "reduce", 2)
    r0, r1 = (r["result"] for r in results)
    assert "error" not in r0 and "error" not in r1, results[0]["log"][-2000:]
    assert r0["sum"] == r1["sum"] == 10.0  # replicas 1+2+3+4 over two processes
    assert r0["all_reduce"] == r1["all_reduce"] == [10.0, 10.0]
    # DATA sharding after the legacy split (tf.distribute's rule): pieces alternate between workers
    assert r0["steps"][0] == [[0, 1], [4, 5]] and r1["steps"][0] == [[2, 3], []]
    assert r0["steps"][-1] == [[18], []] and r1["steps"][-1] == [[19], []]
    assert r0["means"] == r1["means"] == [2.5, 8.5, 14.5, 18.5]


def test_a_chief_and_a_worker_form_the_group_with_the_chief_first(tmp_path):
    r0, r1 = (r["result"] for r in launch(tmp_path, "reduce", 2, chief=True))
    assert r0["task"] == ["chief", 0] and r0["process"] == 0 and r1["process"] == 1
    assert r0["sum"] == r1["sum"] == 10.0


def test_a_worker_that_never_arrives_makes_the_others_fail_with_a_timeout(tmp_path):
    (r0,) = launch(tmp_path, "reduce", 2, start=1)
    assert "TimeoutError" in r0["result"]["error"] and "worker:1" in r0["result"]["error"]


def test_a_worker_that_dies_makes_the_others_fail_with_a_timeout_in_the_input_loop(tmp_path):
    r0, r1 = launch(tmp_path, "die_after_join", 2)
    assert r1["rc"] == 3
    assert "TimeoutError" in r0["result"]["error"] and "worker 1 did not report step" in r0["result"]["error"]


def test_a_worker_that_dies_during_run_makes_jax_terminate_the_others(tmp_path):
    r0, r1 = launch(tmp_path, "die_in_run", 2)
    assert r0["rc"] != 0 and r0["result"] is None
    assert "stopped sending heartbeats" in r0["log"] or "another task died" in r0["log"]


def test_file_sharded_training_from_tfrecords_keeps_workers_identical(tmp_path):
    results = launch(tmp_path, "train", 2, extra=["--tfrecord", str(tmp_path / "data")])
    for r in results:
        assert r["rc"] == 0 and r["result"] and "error" not in r["result"], r["log"][-2000:]
    a, b = (r["result"] for r in results)
    assert a["params"] == b["params"] and a["losses"] == b["losses"]
    assert a["losses"][-1] < a["losses"][0]
