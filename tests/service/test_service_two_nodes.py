"""A two-node Ray cluster on 127.0.0.1 (``ray start --head`` + ``ray start --address``): the service started
on it with ``start`` and read by a consumer process that connects by address (slow: a cluster start)."""

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("ray")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ray_cluster import ENV, WORKER_PORTS, ray, start_head, stop  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]

PORT = "26379"




def test_a_two_node_cluster_serves_a_distributed_epoch():
    head = start_head(int(PORT))
    assert head.returncode == 0, head.stderr[-2000:]
    try:
        node = ray("start", f"--address=127.0.0.1:{PORT}", "--node-ip-address=127.0.0.1", "--num-cpus=1",
                   "--disable-usage-stats", *WORKER_PORTS)
        assert node.returncode == 0, node.stderr[-2000:]
        script = textwrap.dedent(f"""
            import jaxfeed.service as svc
            from jaxfeed.pipeline import Dataset
            svc.start(num_workers=2, address="127.0.0.1:{PORT}")
            ds = Dataset.range(2000).map(lambda x: x + 1).apply(
                svc.distribute("distributed_epoch", "127.0.0.1:{PORT}", split_size=100))
            got = [int(x) for x in ds]
            assert got == list(range(1, 2001)), got[:10]
            print("OK")
        """)
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                              env={**os.environ, **ENV})
        assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-3000:]
    finally:
        stop()
