"""jaxfeed.service on a local Ray instance (127.0.0.1): modes, job sharing, coordinated reads, faults,
determinism and checkpoints. Skipped without ray (pip install jaxfeed[service])."""

import random

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import jaxfeed.service as svc  # noqa: E402
from jaxfeed.pipeline import Dataset, Options  # noqa: E402
from jaxfeed.pipeline.errors import FailedPreconditionError, InvalidArgumentError, UnavailableError  # noqa: E402

N = 3000


@pytest.fixture(scope="module")
def ray_local():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, namespace="jaxfeed-tests",
             address="local", _node_ip_address="127.0.0.1")
    yield
    ray.shutdown()


@pytest.fixture
def service(ray_local):
    with svc.LocalService(num_workers=3) as s:
        yield s


def _doubled(n=N):
    return Dataset.range(n).map(lambda x: x * 2)


def test_distributed_epoch_processes_each_element_once_in_split_order(service):
    ds = _doubled().apply(svc.distribute("distributed_epoch", service, split_size=256))
    assert [int(x) for x in ds] == [2 * i for i in range(N)]
    assert ds.element_spec == _doubled().element_spec


def test_parallel_epochs_gives_every_worker_the_whole_dataset(service):
    got = sorted(int(x) for x in Dataset.range(50).apply(svc.distribute("parallel_epochs", service)))
    assert got == sorted(list(range(50)) * 3)


def test_static_sharding_gives_each_worker_a_shard(service):
    got = sorted(int(x) for x in Dataset.range(60).apply(svc.distribute(svc.ShardingPolicy.DATA, service)))
    assert got == list(range(60))


def test_a_file_source_splits_by_file(service, tmp_path):
    from jaxfeed.formats import TextLineDataset

    names = []
    for f in range(4):
        (tmp_path / f"f{f}.txt").write_text("".join(f"{f}-{i}\n" for i in range(5)))
        names.append(str(tmp_path / f"f{f}.txt"))
    ds = TextLineDataset(names).apply(svc.distribute("distributed_epoch", service))
    assert [bytes(x) for x in ds] == [f"{f}-{i}".encode() for f in range(4) for i in range(5)]


def test_the_order_does_not_depend_on_the_number_or_speed_of_workers(ray_local):
    def slow_sometimes(x):
        if int(x) % 97 == 0:
            import time

            time.sleep(0.01)
        return x + 1

    runs = []
    for workers in (1, 2, 3):
        with svc.LocalService(num_workers=workers) as s:
            ds = Dataset.range(1500).map(slow_sometimes).apply(
                svc.distribute("distributed_epoch", s, split_size=100))
            runs.append([int(x) for x in ds])
    assert runs[0] == runs[1] == runs[2] == list(range(1, 1501))


def test_a_worker_killed_mid_epoch_loses_and_repeats_nothing(service):
    ds = _doubled().apply(svc.distribute("distributed_epoch", service, split_size=128))
    it = iter(ds)
    got = [int(next(it)) for _ in range(700)]
    service.kill_worker(1)
    got += [int(x) for x in it]
    assert got == [2 * i for i in range(N)]


def test_two_consumers_of_one_job_split_the_epoch_exactly_once_despite_a_kill(service):
    job = svc.distribute("distributed_epoch", service, job_name="shared", split_size=64)
    a, b = iter(_doubled().apply(job)), iter(_doubled().apply(job))
    rng = random.Random(5)
    kill_at = rng.randrange(200, 2000)
    got, live = [], [a, b]
    while live:
        it = rng.choice(live)
        block = it.next_many(rng.randrange(1, 50))
        if not block:
            live.remove(it)
        got += [int(x) for x in block]
        if len(got) >= kill_at and kill_at > 0:
            service.kill_worker(rng.randrange(3))
            kill_at = -1
    assert sorted(got) == [2 * i for i in range(N)]


def test_coordinated_reads_give_each_round_from_one_worker(service):
    def tagged(x):
        import os

        return np.array([x, os.getpid()], np.int64)

    job = dict(job_name="coordinated", num_consumers=2)
    ds = Dataset.range(1_000_000).map(tagged)
    c0 = iter(ds.apply(svc.distribute("parallel_epochs", service, consumer_index=0, **job)))
    c1 = iter(ds.apply(svc.distribute("parallel_epochs", service, consumer_index=1, **job)))
    for _ in range(9):
        x0, x1 = next(c0), next(c1)
        assert x0[1] == x1[1]  # the same worker process served the round
        assert x1[0] == x0[0] + 1  # consecutive elements of that worker's stream


def test_a_distributed_epoch_position_restores_exactly_and_refuses_another_job(service):
    ds = _doubled().apply(svc.distribute("distributed_epoch", service, split_size=300))
    it = ds.make_iterator()
    head = [int(next(it)) for _ in range(1111)]
    state = it.get_state()
    assert head + [int(x) for x in ds.make_iterator(state=state)] == [2 * i for i in range(N)]
    other = Dataset.range(N).apply(svc.distribute("distributed_epoch", service, split_size=300))
    with pytest.raises((InvalidArgumentError, FailedPreconditionError)):
        other.make_iterator(state=state)


def test_a_parallel_epochs_position_restores_exactly(service):
    ds = Dataset.range(40).shuffle(40, seed=3, reshuffle_each_iteration=False).apply(
        svc.distribute("parallel_epochs", service))
    want = [int(x) for x in ds]
    it = ds.make_iterator()
    head = [int(next(it)) for _ in range(70)]
    assert head + [int(x) for x in ds.make_iterator(state=it.get_state())] == want


def test_shared_jobs_cannot_be_saved(service):
    ds = _doubled().apply(svc.distribute("distributed_epoch", service, job_name="named"))
    it = ds.make_iterator()
    next(it)
    with pytest.raises(FailedPreconditionError):
        it.get_state()


def test_register_and_from_dataset_id(service):
    dataset_id = svc.register_dataset(service, Dataset.range(10))
    ds = svc.from_dataset_id("distributed_epoch", service, dataset_id)
    assert [int(x) for x in ds] == list(range(10))


def test_argument_errors(service):
    with pytest.raises(InvalidArgumentError):
        svc.distribute("everything", service)
    with pytest.raises(InvalidArgumentError):
        Dataset.range(3).apply(svc.distribute("parallel_epochs", service, consumer_index=0))
    with pytest.raises(InvalidArgumentError):
        Dataset.range(3).apply(svc.distribute("distributed_epoch", service, job_name="j", consumer_index=0,
                                              num_consumers=2))
    gen = Dataset.from_generator(lambda: iter(range(3)), output_signature=Dataset.range(1).element_spec)
    with pytest.raises(InvalidArgumentError, match="cannot split"):
        gen.apply(svc.distribute("distributed_epoch", service))


def test_a_dead_service_is_a_clear_error_not_a_hang(ray_local):
    s = svc.LocalService(num_workers=2).start()
    ds = _doubled().apply(svc.distribute("distributed_epoch", s, split_size=100))
    it = iter(ds)
    next(it)
    s.shutdown()
    with pytest.raises(UnavailableError):
        list(it)


def test_the_consumer_side_composes_with_prefetch_and_deterministic_options(service):
    options = Options()
    options.deterministic = False
    ds = _doubled(500).apply(svc.distribute("distributed_epoch", service, split_size=50)).with_options(options)
    assert sorted(int(x) for x in ds.prefetch(2)) == [2 * i for i in range(500)]


def test_the_determinism_checker_sees_across_the_service_boundary(service):
    from jaxfeed.determinism.checker import check_determinism

    seeded = Dataset.range(600).map(lambda x, rng: x + rng.integers(0, 100), with_rng=True, seed=1)
    report = check_determinism(seeded.apply(svc.distribute("distributed_epoch", service, split_size=100)))
    assert report.deterministic, report

    def unseeded(x):
        return x + np.random.default_rng().integers(0, 1_000_000)

    noisy = Dataset.range(600).map(unseeded).apply(svc.distribute("distributed_epoch", service, split_size=100))
    report = check_determinism(noisy, bisect=True)
    assert not report.deterministic
    assert "ServiceDataset" in report.culprit
    assert "Map(map_func=" in report.culprit_hint and "unseeded" in report.culprit_hint


def test_a_service_dataset_feeds_a_mirrored_strategy(service):
    import jax

    from jaxfeed.distribute import MirroredStrategy

    strategy = MirroredStrategy(jax.local_devices()[:2])
    ds = Dataset.range(64).map(lambda x: np.float32(x)).apply(
        svc.distribute("distributed_epoch", service, split_size=16)).batch(8)
    dist = strategy.experimental_distribute_dataset(ds)
    total = sum(float(strategy.reduce("SUM", strategy.run(lambda x: x.sum(), args=(step,)), axis=None))
                for step in dist)
    assert total == sum(range(64))


def test_file_sharding_gives_each_worker_its_files(service, tmp_path):
    from jaxfeed.formats import TextLineDataset

    names = []
    for f in range(4):
        (tmp_path / f"s{f}.txt").write_text("".join(f"{f}-{i}\n" for i in range(3)))
        names.append(str(tmp_path / f"s{f}.txt"))
    for policy in (svc.ShardingPolicy.FILE, svc.ShardingPolicy.FILE_OR_DATA):
        got = sorted(bytes(x) for x in TextLineDataset(names).apply(svc.distribute(policy, service)))
        assert got == sorted(f"{f}-{i}".encode() for f in range(4) for i in range(3))
