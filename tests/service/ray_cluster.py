"""A Ray cluster of the test's own on 127.0.0.1, started with the ``ray`` CLI (not a test module).

``ray start --head`` can fail right after an earlier cluster's ``ray stop`` (its processes and ports are
still going away): a failed start is stopped and tried again, up to three times."""

import os
import shutil
import subprocess
import sys
import time

ENV = {"RAY_AUTH_MODE": "disabled"}  # loopback only, no token between the cluster's own processes
# Ray's worker processes take ports from a range of their own (default 10002-19999, where the tests' TF_CONFIG
# ports come from too): a range apart, and a head port outside both
WORKER_PORTS = ("--min-worker-port=30000", "--max-worker-port=30999")


def ray(*args):
    exe = shutil.which("ray", path=os.path.dirname(sys.executable)) or "ray"
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=300, env={**os.environ, **ENV})


def free_head_port() -> int:
    """A free port for the head (GCS), outside Ray's worker range and the TF_CONFIG ports."""
    import random
    import socket

    rng = random.Random()
    while True:
        port = rng.randrange(31000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


def start_head(port: int, num_cpus: int = 1):
    for attempt in range(3):
        head = ray("start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1", f"--num-cpus={num_cpus}",
                   "--include-dashboard=false", "--disable-usage-stats", *WORKER_PORTS)
        if head.returncode == 0:
            return head
        ray("stop", "--force")
        time.sleep(2 * (attempt + 1))
    return head


def stop():
    ray("stop", "--force")
