"""TF_CONFIG and the cluster resolver (tf.distribute.cluster_resolver.TFConfigClusterResolver).

``TF_CONFIG`` is JSON: ``{"cluster": {"chief": ["host:port"], "worker": [...], "ps": [...], "evaluator": [...]},
"task": {"type": "worker", "index": 0}}``. Malformed input raises ``ValueError`` quoting the offending part.

The collective group is the chief (if any) followed by the workers, in that order: a task's position in that
list is its JAX process id, and the first one's address is the ``jax.distributed`` coordinator. ``ps`` and
``evaluator`` tasks are not in the group.
"""

from __future__ import annotations

import json
import os

TASK_TYPES = ("chief", "worker", "ps", "evaluator")
COLLECTIVE_TYPES = ("chief", "worker")


class ClusterSpec:
    """The jobs of a cluster and their task addresses."""

    def __init__(self, cluster):
        if isinstance(cluster, ClusterSpec):
            cluster = cluster.as_dict()
        self._jobs = {job: list(addrs) for job, addrs in (cluster or {}).items()}

    def as_dict(self):
        return {job: list(addrs) for job, addrs in self._jobs.items()}

    @property
    def jobs(self):
        return list(self._jobs)

    def num_tasks(self, job_name):
        return len(self._jobs.get(job_name, []))

    def task_address(self, job_name, task_index):
        return self._jobs[job_name][task_index]

    def job_tasks(self, job_name):
        return list(self._jobs.get(job_name, []))

    def __bool__(self):
        return bool(self._jobs)

    def __eq__(self, other):
        return isinstance(other, ClusterSpec) and other.as_dict() == self.as_dict()

    def __repr__(self):
        return f"ClusterSpec({self._jobs!r})"


def parse_tf_config(raw):
    """Validate TF_CONFIG (a JSON string or a dict); returns (cluster dict, task type, task index)."""
    if raw is None or raw == "":
        return {}, None, None
    if isinstance(raw, str):
        try:
            cfg = json.loads(raw)
        except json.JSONDecodeError as e:
            raise ValueError(f"TF_CONFIG is not valid JSON ({e.msg} at position {e.pos}): {raw[:200]!r}") from None
    else:
        cfg = raw
    if not isinstance(cfg, dict):
        raise ValueError(f"TF_CONFIG must be a JSON object with 'cluster' and 'task', got {cfg!r:.200}")
    unknown_keys = set(cfg) - {"cluster", "task", "rpc_layer", "environment"}
    if unknown_keys:
        raise ValueError(f"TF_CONFIG has unknown key(s) {sorted(unknown_keys)}; expected 'cluster', 'task', "
                         "'rpc_layer', 'environment'")
    cluster = cfg.get("cluster", {}) or {}
    if not isinstance(cluster, dict):
        raise ValueError(f"TF_CONFIG 'cluster' must be an object of job name -> address list, got {cluster!r:.200}")
    for job, addrs in cluster.items():
        if job not in TASK_TYPES:
            raise ValueError(f"TF_CONFIG 'cluster' has unknown task type {job!r}; known types: {list(TASK_TYPES)}")
        if isinstance(addrs, dict):  # TF also accepts {index: address}
            try:
                addrs = [addrs[k] for k in sorted(addrs, key=int)]
            except (TypeError, ValueError):
                raise ValueError(f"TF_CONFIG 'cluster'.{job} has non-integer task indices: {addrs!r:.200}") from None
            cluster[job] = addrs
        if not isinstance(addrs, list) or not all(isinstance(a, str) and ":" in a for a in addrs):
            raise ValueError(f"TF_CONFIG 'cluster'.{job} must be a list of 'host:port' strings, got {addrs!r:.200}")
    if len(cluster.get("chief", [])) > 1:
        raise ValueError(f"TF_CONFIG 'cluster'.chief may hold one task, got {cluster['chief']!r}")
    task = cfg.get("task", {}) or {}
    if not isinstance(task, dict):
        raise ValueError(f"TF_CONFIG 'task' must be an object with 'type' and 'index', got {task!r:.200}")
    ttype, index = task.get("type"), task.get("index", 0)
    if ttype is None:
        if cluster:
            raise ValueError(f"TF_CONFIG 'task' has no 'type' (task = {task!r})")
        return cluster, None, None
    if ttype not in TASK_TYPES:
        raise ValueError(f"TF_CONFIG 'task' has unknown type {ttype!r} (task = {task!r}); known types: "
                         f"{list(TASK_TYPES)}")
    if isinstance(index, bool) or not isinstance(index, int):
        if isinstance(index, str) and index.isdigit():
            index = int(index)
        else:
            raise ValueError(f"TF_CONFIG 'task' index must be an integer, got {index!r} (task = {task!r})")
    n = len(cluster.get(ttype, []))
    if ttype != "evaluator" or n:
        if not 0 <= index < n:
            raise ValueError(f"TF_CONFIG 'task' index {index} is out of range for type {ttype!r}, which has {n} "
                             f"task(s) in the cluster {cluster.get(ttype, [])!r} (task = {task!r})")
    return cluster, ttype, index


class TFConfigClusterResolver:
    """Reads the cluster from ``TF_CONFIG`` (or from the ``tf_config`` argument, a str or dict)."""

    def __init__(self, task_type=None, task_id=None, rpc_layer=None, environment=None, *, tf_config=None):
        raw = tf_config if tf_config is not None else os.environ.get("TF_CONFIG")
        cluster, ttype, tid = parse_tf_config(raw)
        self._cluster = ClusterSpec(cluster)
        self.task_type = task_type if task_type is not None else ttype
        self.task_id = task_id if task_id is not None else tid
        cfg = json.loads(raw) if isinstance(raw, str) and raw else (raw or {})
        self.rpc_layer = rpc_layer if rpc_layer is not None else cfg.get("rpc_layer")
        self.environment = environment if environment is not None else cfg.get("environment", "")

    def cluster_spec(self) -> ClusterSpec:
        return self._cluster

    def master(self, task_type=None, task_id=None, rpc_layer=None):
        task_type = self.task_type if task_type is None else task_type
        task_id = self.task_id if task_id is None else task_id
        if task_type is None or not self._cluster:
            return ""
        addr = self._cluster.task_address(task_type, task_id)
        layer = rpc_layer or self.rpc_layer
        return f"{layer}://{addr}" if layer else addr

    def num_accelerators(self, task_type=None, task_id=None, config_proto=None):
        import jax

        gpus = [d for d in jax.local_devices() if d.platform == "gpu"]
        return {"GPU": len(gpus)} if gpus else {}

    # ------------------------------------------------------------------ the collective group
    def collective_tasks(self) -> list[tuple[str, int]]:
        """(type, index) of the tasks in the collective group, in process-id order."""
        return [(t, i) for t in COLLECTIVE_TYPES for i in range(self._cluster.num_tasks(t))]

    def in_collective_group(self) -> bool:
        return self.task_type is None or self.task_type in COLLECTIVE_TYPES

    def process_id(self) -> int:
        if self.task_type is None:
            return 0
        return self.collective_tasks().index((self.task_type, self.task_id))

    def coordinator_address(self) -> str | None:
        tasks = self.collective_tasks()
        if not tasks:
            return None
        t, i = tasks[0]
        return self._cluster.task_address(t, i)

    def __repr__(self):
        return f"TFConfigClusterResolver(task_type={self.task_type!r}, task_id={self.task_id!r}, {self._cluster!r})"


def rendezvous(resolver: TFConfigClusterResolver, timeout: float) -> None:
    """Check that every task of the collective group is up before JAX joins them (JAX aborts the process,
    uncatchably, when a peer never arrives). Uses the TF_CONFIG addresses of the non-coordinator tasks:
    each listens on its own address until the coordinator (the first task) has contacted it; the coordinator
    contacts them all. Raises ``TimeoutError`` naming the task that did not show up."""
    import socket
    import time

    tasks = resolver.collective_tasks()
    me = resolver.process_id()
    spec = resolver.cluster_spec()
    deadline = time.monotonic() + timeout
    if me == 0:
        for t, i in tasks[1:]:
            host, port = spec.task_address(t, i).rsplit(":", 1)
            while True:
                try:
                    with socket.create_connection((host, int(port)), timeout=1.0) as s:
                        s.sendall(b"jaxfeed-rendezvous\n")
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise TimeoutError(
                            f"MultiWorkerMirroredStrategy: task {t}:{i} at {host}:{port} did not come up within "
                            f"{timeout:g}s (this is the coordinator, {tasks[0][0]}:{tasks[0][1]}); check that every "
                            "task in TF_CONFIG was started.") from None
                    time.sleep(0.1)
        return
    t, i = tasks[me]
    host, port = spec.task_address(t, i).rsplit(":", 1)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as srv:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            srv.bind((host, int(port)))
        except OSError as e:
            raise OSError(f"MultiWorkerMirroredStrategy: task {t}:{i} cannot listen on its TF_CONFIG address "
                          f"{host}:{port}: {e}") from None
        srv.listen(8)
        while True:
            srv.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                conn, _ = srv.accept()
            except (socket.timeout, TimeoutError):
                c = tasks[0]
                raise TimeoutError(
                    f"MultiWorkerMirroredStrategy: the coordinator task {c[0]}:{c[1]} at "
                    f"{spec.task_address(*c)} did not contact task {t}:{i} within {timeout:g}s; check that every "
                    "task in TF_CONFIG was started.") from None
            with conn:
                conn.settimeout(1.0)
                try:
                    if conn.recv(64).startswith(b"jaxfeed-rendezvous"):
                        return
                except OSError:
                    pass
