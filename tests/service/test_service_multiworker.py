"""One jaxfeed.service job feeding every host of a MultiWorkerMirroredStrategy: 2 worker processes on
127.0.0.1 share a distributed_epoch job on a Ray cluster started on loopback; together they see every
element exactly once (slow: a Ray cluster and a JAX process group)."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("ray")

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import local_cluster  # noqa: E402
from ray_cluster import ENV, free_head_port, start_head, stop  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]

HERE = os.path.dirname(os.path.abspath(__file__))


def test_one_service_job_feeds_all_hosts_exactly_once(tmp_path):
    port = free_head_port()
    address = f"127.0.0.1:{port}"
    head = start_head(port, num_cpus=2)
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
        stop()
