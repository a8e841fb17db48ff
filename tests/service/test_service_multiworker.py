"""One jaxfeed.service job feeding every host of a MultiWorkerMirroredStrategy: 2 worker processes on
127.0.0.1 share a distributed_epoch job on a Ray cluster started on loopback; together they see every
element exactly once (slow: a Ray cluster and a JAX process group)."""

import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("ray")

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import local_cluster  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]

HERE = os.path.dirname(os.path.abspath(__file__))
ENV = {"RAY_AUTH_MODE": "disabled"}


def _ray(*args):
    exe = shutil.which("ray", path=os.path.dirname(sys.executable)) or "ray"
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=300, env={**os.environ, **ENV})


def test_one_service_job_feeds_all_hosts_exactly_once(tmp_path):
    (port,) = local_cluster.free_ports(1)
    address = f"127.0.0.1:{port}"
    head = _ray("start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1", "--num-cpus=2",
                "--include-dashboard=false", "--disable-usage-stats")
    assert head.returncode == 0, head.stderr[-2000:]
    try:
        setup = subprocess.run([sys.executable, "-c", f"import jaxfeed.service as s; s.start(2, {address!r})"],
                               capture_output=True, text=True, timeout=300, env={**os.environ, **ENV})
        assert setup.returncode == 0, setup.stderr[-2000:]
        task = os.path.join(HERE, "service_multiworker_task.py")
        results = local_cluster.launch(tmp_path, "service", 2, lambda out: [task, address, str(out)], timeout=400,
                                       env=ENV)
        local_cluster.assert_ok(results)
        seen = [x for r in results for x in r["result"]["seen"]]
        assert sorted(seen) == list(range(200))  # every element once, across the hosts
        assert all(r["result"]["seen"] for r in results)  # and both hosts got some
    finally:
        _ray("stop", "--force")
