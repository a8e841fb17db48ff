"""jaxfeed.service: tf.data service's input processing, distributed on Ray.

    with jaxfeed.service.LocalService(num_workers=2) as service:     # or service="ray://head:10001"
        ds = (Dataset.range(10_000).map(heavy_augment)
              .apply(jaxfeed.service.distribute("distributed_epoch", service)))
        for element in ds: ...

Names and meanings follow ``tf.data.experimental.service``: ``distribute``, ``register_dataset``,
``from_dataset_id``, ``ShardingPolicy``; processing modes ``"parallel_epochs"`` and ``"distributed_epoch"``;
``job_name`` sharing; coordinated reads with ``consumer_index``/``num_consumers``. The consumer side is an
ordinary jaxfeed ``Dataset``. Guarantees (delivery, order, faults, checkpoints) are in ``source.py`` and
README "Scale out". Needs ``pip install jaxfeed[service]`` (Ray).
"""

from __future__ import annotations

from jaxfeed.pipeline.dataset import Dataset
from jaxfeed.pipeline.errors import InvalidArgumentError

from .cluster import LocalService, ServiceHandle, connect, start
from .modes import ShardingPolicy, sharding_policy

_TARGETS = ("AUTO", "ANY")


def register_dataset(service, dataset: Dataset, compression=None, dataset_id: str | None = None) -> str:
    """Register ``dataset`` with the service; returns its id (a digest of the pickled graph unless given)."""
    import cloudpickle

    handle = connect(service)
    graph_bytes = cloudpickle.dumps(dataset)
    return handle.get(handle.dispatcher.register_dataset.remote(graph_bytes, dataset_id), "registering a dataset")


def from_dataset_id(processing_mode, service, dataset_id: str, element_spec=None, job_name=None,
                    consumer_index=None, num_consumers=None, max_outstanding_requests=None, target_workers="AUTO",
                    split_size=None) -> Dataset:
    """A Dataset reading the registered dataset ``dataset_id`` through the service."""
    import cloudpickle

    from . import splits
    from .source import ServiceSource

    policy = sharding_policy(processing_mode)
    _check(policy, job_name, consumer_index, num_consumers, max_outstanding_requests, target_workers)
    handle = connect(service)
    graph_bytes = handle.get(handle.dispatcher.dataset.remote(dataset_id), "reading a registered dataset")
    dataset = cloudpickle.loads(graph_bytes)
    spec = dataset.element_spec if element_spec is None else element_spec
    plan = splits.plan(dataset, split_size or splits.DEFAULT_SPLIT_SIZE) if policy == ShardingPolicy.DYNAMIC else None
    return Dataset(ServiceSource(handle, dataset_id, graph_bytes, spec, policy, job_name, consumer_index,
                                 num_consumers, max_outstanding_requests, plan))


def distribute(processing_mode, service, job_name=None, consumer_index=None, num_consumers=None,
               max_outstanding_requests=None, data_transfer_protocol=None, compression=None,
               target_workers="AUTO", split_size=None):
    """For ``Dataset.apply``: the dataset, processed by the service's workers."""
    sharding_policy(processing_mode)  # argument errors now, not at apply time
    if data_transfer_protocol not in (None, "grpc", "ray"):
        raise InvalidArgumentError(f"distribute: data_transfer_protocol {data_transfer_protocol!r} is not "
                                   "supported; elements travel through Ray's object store.", "service")

    def apply(dataset: Dataset) -> Dataset:
        dataset_id = register_dataset(service, dataset)
        return from_dataset_id(processing_mode, service, dataset_id, dataset.element_spec, job_name, consumer_index,
                               num_consumers, max_outstanding_requests, target_workers, split_size)

    return apply


def _check(policy, job_name, consumer_index, num_consumers, max_outstanding_requests, target_workers):
    if (consumer_index is None) != (num_consumers is None):
        raise InvalidArgumentError("service: give both consumer_index and num_consumers, or neither.", "service")
    if num_consumers is not None:
        if not 0 <= consumer_index < num_consumers:
            raise InvalidArgumentError(f"service: consumer_index {consumer_index} is not in [0, {num_consumers}).",
                                       "service")
        if job_name is None:
            raise InvalidArgumentError("service: coordinated reads (consumer_index/num_consumers) need a job_name "
                                       "shared by the consumers.", "service")
        if policy == ShardingPolicy.DYNAMIC:
            raise InvalidArgumentError("service: coordinated reads need a streaming processing mode "
                                       "(parallel_epochs or a static sharding policy), not distributed_epoch.",
                                       "service")
    if max_outstanding_requests is not None and max_outstanding_requests < 1:
        raise InvalidArgumentError(f"service: max_outstanding_requests must be >= 1, got {max_outstanding_requests}.",
                                   "service")
    if str(target_workers).upper() not in _TARGETS:
        raise InvalidArgumentError(f"service: target_workers {target_workers!r} is not supported (AUTO or ANY).",
                                   "service")


__all__ = ["LocalService", "ServiceHandle", "ShardingPolicy", "connect", "distribute", "from_dataset_id",
           "register_dataset", "start"]
