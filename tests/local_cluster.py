"""The tasks of a TF_CONFIG cluster as real processes on 127.0.0.1, for the multi-process tests (not a test
module): race-free ports, one deadline for all tasks, every task's log on failure."""

import json
import os
import random
import socket
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIND_ERRORS = ("Address already in use", "cannot listen on its TF_CONFIG address", "Failed to bind")


def free_ports(n):
    """n distinct free ports for a TF_CONFIG cluster, without races: taken outside the kernel's ephemeral range
    (which bind(0) and outgoing connections draw from, so nothing else is handed them while the workers start),
    from a random place in that space (parallel test runs do not collide), and bindable right now (all held
    open together while chosen, so none is chosen twice)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, _ = (int(x) for x in f.read().split())
    except (OSError, ValueError):
        low = 32768
    top = low - 1 if low > 12000 else 65535
    bottom = 10000 if low > 12000 else low + 10000  # an ephemeral range that starts low: stay above it
    rng = random.Random(os.getpid() ^ int.from_bytes(os.urandom(4), "little"))
    socks, ports = [], []
    try:
        while len(ports) < n:
            port = rng.randrange(bottom, top)
            if port in ports:
                continue
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            socks.append(s)
            ports.append(port)
        return ports
    finally:
        for s in socks:
            s.close()


def describe(results):
    """Every worker's exit status, result and log (stdout and stderr), for a failing assertion."""
    parts = []
    for i, r in enumerate(results):
        parts.append(f"----- worker {i}: rc={r['rc']} result={json.dumps(r['result'])[:2000]}\n{r['log'][-6000:]}")
    return "\n".join(parts)


def assert_ok(results):
    for r in results:
        assert r["rc"] == 0 and r["result"] and "error" not in r["result"], describe(results)


def launch(tmp_path, name, n, command, start=None, chief=False, timeout=120, env=None):
    """Start ``start`` (default n) of the n tasks of a TF_CONFIG cluster (the first one a chief if ``chief``),
    each running ``python *command(out)`` where ``out`` is the JSON file the task writes its result to, with
    2 CPU devices and ``env`` added to the environment; returns their results (``rc``, ``log``, ``result``:
    the JSON or None). All tasks share one deadline (``timeout`` s); past it they are killed and the test
    fails with every task's log. A start that lost its port to another process is retried with new ports."""
    for attempt in range(3):
        results = _launch_once(tmp_path, name, n, command, start, chief, timeout, env or {}, attempt)
        if not any(e in r["log"] for r in results for e in BIND_ERRORS) or attempt == 2:
            return results


def _launch_once(tmp_path, name, n, command, start, chief, timeout, env, attempt):
    ports = free_ports(n)
    addrs = [f"127.0.0.1:{p}" for p in ports]
    cluster = {"chief": addrs[:1], "worker": addrs[1:]} if chief else {"worker": addrs}
    tasks = ([("chief", 0)] + [("worker", i) for i in range(n - 1)]) if chief else [("worker", i) for i in range(n)]
    procs = []
    for i in range(n if start is None else start):
        task = {"type": tasks[i][0], "index": tasks[i][1]}
        task_env = {**os.environ, "TF_CONFIG": json.dumps({"cluster": cluster, "task": task}),
                    "XLA_FLAGS": "--xla_force_host_platform_device_count=2", **env}
        out = tmp_path / f"{name}_{attempt}_{i}.json"
        log = open(tmp_path / f"{name}_{attempt}_{i}.log", "w+b")  # a file: a chatty worker never blocks on a pipe
        procs.append((subprocess.Popen([sys.executable, *command(out)], env=task_env, cwd=ROOT,
                                       stdout=log, stderr=subprocess.STDOUT), out, log))
    deadline = time.monotonic() + timeout
    timed_out = False
    for p, _, _ in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            break
    if timed_out:
        for p, _, _ in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    results = []
    for p, out, log in procs:
        log.seek(0)
        text = log.read().decode(errors="replace")
        log.close()
        data = json.loads(out.read_text()) if out.exists() else None
        results.append({"rc": p.returncode, "log": text, "result": data})
    if timed_out:
        pytest.fail(f"{name}: the workers did not finish within {timeout}s (killed)\n{describe(results)}")
    return results
