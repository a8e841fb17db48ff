"""Where the service runs: ``LocalService`` (an embedded Ray instance on this machine) or an existing Ray
cluster (``"ray://host:port"``, ``"auto"``) where ``start`` has created the service's named actors.

A ``ServiceHandle`` is what consumers hold: the dispatcher actor and the worker actors. Every Ray call
goes through ``get``, which turns a lost head, a dead actor and a time-out into jaxfeed errors, so a
consumer never hangs on a dead service.
"""

from __future__ import annotations

from jaxfeed.pipeline.errors import DeadlineExceededError, UnavailableError

NAMESPACE = "jaxfeed"
DISPATCHER = "jaxfeed-dispatcher"
CALL_TIMEOUT = 600.0  # seconds one Ray call may take (a split of heavy work included) before it is an error


def _ray():
    try:
        import ray
    except ImportError:
        raise ImportError("jaxfeed.service runs on Ray: pip install jaxfeed[service]") from None
    return ray


class WorkerLost(Exception):
    """A worker actor died (the consumer reassigns its work)."""

    def __init__(self, index: int, cause: BaseException):
        super().__init__(f"worker {index} died: {cause}")
        self.index = index


class ServiceHandle:
    """The dispatcher and the workers of one service (picklable: Ray actor handles)."""

    def __init__(self, dispatcher, workers: list, address: str):
        self.dispatcher = dispatcher
        self.workers = list(workers)
        self.address = address

    def get(self, refs, what: str, timeout: float = CALL_TIMEOUT, worker: int | None = None):
        ray = _ray()
        try:
            return ray.get(refs, timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            raise DeadlineExceededError(f"service at {self.address}: {what} took more than {timeout:.0f} s.",
                                        "service") from None
        except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError) as e:
            if worker is not None:
                raise WorkerLost(worker, e) from None
            raise UnavailableError(f"service at {self.address}: {what} failed, the service is gone ({type(e).__name__}"
                                   f"). Is the Ray head or the process that started the service still running?",
                                   "service") from None
        except ray.exceptions.RaySystemError as e:
            raise UnavailableError(f"service at {self.address}: {what} failed: {e}", "service") from None

    def live_workers(self) -> list[int]:
        current = self.get(self.dispatcher.workers.remote(), "listing workers")
        return [i for i, w in enumerate(current) if w is not None]


def _remote_classes():
    ray = _ray()
    from .actors import Dispatcher, Worker

    return (ray.remote(num_cpus=0)(Dispatcher), ray.remote(num_cpus=0, max_restarts=0)(Worker))


def start(num_workers: int, address: str = "auto", detached: bool = True) -> ServiceHandle:
    """Create the service's dispatcher and ``num_workers`` workers on the Ray cluster at ``address``
    (joining it first if this process is not connected). With ``detached`` the actors outlive this
    process, and consumers elsewhere reach them with ``service=address``."""
    ray = _ray()
    if not ray.is_initialized():
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=False)
    dispatcher_cls, worker_cls = _remote_classes()
    lifetime = {"lifetime": "detached"} if detached else {}
    dispatcher = dispatcher_cls.options(name=DISPATCHER, namespace=NAMESPACE, **lifetime).remote()
    workers = [worker_cls.options(namespace=NAMESPACE, **lifetime).remote(i) for i in range(num_workers)]
    ray.get(dispatcher.add_workers.remote(workers))
    ray.get([w.ping.remote() for w in workers])
    return ServiceHandle(dispatcher, workers, address)


def connect(service) -> ServiceHandle:
    """A handle for ``service``: a ``LocalService``, a ``ServiceHandle``, or a Ray address."""
    if isinstance(service, ServiceHandle):
        return service
    if isinstance(service, LocalService):
        return service.handle
    if not isinstance(service, str):
        raise TypeError(f"service must be a LocalService or a Ray address ('ray://host:port', 'auto'), got "
                        f"{service!r}")
    ray = _ray()
    if not ray.is_initialized():
        ray.init(address=service, namespace=NAMESPACE, log_to_driver=False)
    try:
        dispatcher = ray.get_actor(DISPATCHER, namespace=NAMESPACE)
    except ValueError:
        raise UnavailableError(f"no jaxfeed service runs on the Ray cluster at {service!r}: start one there with "
                               "jaxfeed.service.start(num_workers=N).", "service") from None
    handle = ServiceHandle(dispatcher, [], service)
    handle.workers = handle.get(dispatcher.workers.remote(), "listing workers")
    return handle


class LocalService:
    """An embedded Ray instance on this machine with a dispatcher and ``num_workers`` worker actors; a
    context manager that shuts them down. If Ray is already running in this process, the service's actors
    are added to it and only they are removed at the end."""

    def __init__(self, num_workers: int = 2, num_cpus: int | None = None):
        if num_workers < 1:
            raise ValueError(f"LocalService needs at least one worker, got {num_workers}")
        self.num_workers = num_workers
        self.num_cpus = num_cpus
        self._handle: ServiceHandle | None = None
        self._started_ray = False

    @property
    def handle(self) -> ServiceHandle:
        if self._handle is None:
            self.start()
        return self._handle

    def start(self) -> "LocalService":
        if self._handle is not None:
            return self
        ray = _ray()
        if not ray.is_initialized():
            # the node's services on the loopback address: nothing leaves the machine
            ray.init(num_cpus=self.num_cpus, include_dashboard=False, log_to_driver=False, namespace=NAMESPACE,
                     address="local", _node_ip_address="127.0.0.1")
            self._started_ray = True
        dispatcher_cls, worker_cls = _remote_classes()
        dispatcher = dispatcher_cls.remote()
        workers = [worker_cls.remote(i) for i in range(self.num_workers)]
        ray.get(dispatcher.add_workers.remote(workers))
        ray.get([w.ping.remote() for w in workers])
        self._handle = ServiceHandle(dispatcher, workers, "local")
        return self

    def kill_worker(self, index: int) -> None:
        """End worker ``index`` at once (fault-injection for tests and demos)."""
        _ray().kill(self.handle.workers[index], no_restart=True)

    def shutdown(self) -> None:
        if self._handle is None:
            return
        ray = _ray()
        for actor in [self._handle.dispatcher] + self._handle.workers:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self._handle = None
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.shutdown()

    def __repr__(self):
        return f"LocalService(num_workers={self.num_workers})"
