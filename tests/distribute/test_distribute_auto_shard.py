"""Auto-shard passes and the plan: graph rewrites only, no JAX device needed (docs/tf-behaviour.md#auto-shard)."""

import logging

import pytest

from jaxfeed.distribute import AutoShardError, auto_shard, auto_shard_plan
from jaxfeed.formats import TFRecordDataset, TFRecordWriter
from jaxfeed.pipeline import SHARD_HINT, AutoShardPolicy, Dataset, Options
from jaxfeed.pipeline.errors import InvalidArgumentError, NotFoundError
from jaxfeed.pipeline.iterators.base import Iterator
from jaxfeed.pipeline.nodes.base import UNKNOWN, Node
from jaxfeed.pipeline.structure import STRING, TensorSpec


# ------------------------------------------------------------------ a tiny fake reader (the reader contract)
class FakeReader(Node):
    """Reads 'files' named by inputs[0]; file 'fK' holds records 'fK:r0'..'fK:r{n-1}'."""

    kind = "FakeReader"
    reads_files = True

    def __init__(self, names, records_per_file=2):
        super().__init__((names,))
        self.k = records_per_file

    def compute_spec(self):
        return TensorSpec((), STRING)

    def cardinality(self):
        return UNKNOWN

    def make_iterator(self, ctx):
        return _FakeReaderIterator(self, ctx)


class _FakeReaderIterator(Iterator):
    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.input = ctx.build(node.inputs[0])
        self.pending = []

    def _next(self):
        while not self.pending:
            name = self.input.next()
            name = name.decode() if isinstance(name, bytes) else str(name)
            self.pending = [f"{name}:r{i}".encode() for i in range(self.node.k)]
        return self.pending.pop(0)

    def children(self):
        return [self.input]


def fake_files(n, records=2):
    names = Dataset.from_tensor_slices([f"f{i}" for i in range(n)])
    return Dataset(FakeReader(names._node, records))


def with_policy(ds, policy):
    o = Options()
    o.experimental_distribute.auto_shard_policy = policy
    return ds.with_options(o)


def values(ds):
    return [x.decode() if isinstance(x, bytes) else (x.tolist() if hasattr(x, "tolist") else x) for x in ds]


@pytest.fixture
def tfrecord_files(tmp_path):
    paths = []
    for f in range(4):
        p = str(tmp_path / f"f{f}.tfrecord")
        with TFRecordWriter(p) as w:
            for r in range(2):
                w.write(f"f{f}r{r}".encode())
        paths.append(p)
    return paths


# ------------------------------------------------------------------ FILE
def test_file_policy_gives_each_worker_every_nth_file_in_full():
    ds = fake_files(4)
    assert values(auto_shard(ds, 2, 0)) == ["f0:r0", "f0:r1", "f2:r0", "f2:r1"]
    assert values(auto_shard(ds, 2, 1)) == ["f1:r0", "f1:r1", "f3:r0", "f3:r1"]


def test_file_sharding_passes_through_batch_map_and_prefetch():
    ds = fake_files(4).map(lambda x: x).batch(2).prefetch(1)
    got = [[y.decode() for y in b] for b in auto_shard(ds, 2, 1)]
    assert got == [["f1:r0", "f1:r1"], ["f3:r0", "f3:r1"]]


def test_file_sharding_with_real_tfrecord_reader(tfrecord_files):
    ds = TFRecordDataset(tfrecord_files)
    assert values(auto_shard(ds, 2, 0)) == ["f0r0", "f0r1", "f2r0", "f2r1"]
    assert values(auto_shard(ds, 2, 1)) == ["f1r0", "f1r1", "f3r0", "f3r1"]


def test_interleave_whose_function_returns_a_reader_is_a_sharding_point(tfrecord_files):
    ds = Dataset.from_tensor_slices(tfrecord_files).interleave(TFRecordDataset, cycle_length=1)
    assert values(auto_shard(ds, 2, 1)) == ["f1r0", "f1r1", "f3r0", "f3r1"]


def test_list_files_shuffle_moves_below_the_shard_so_the_file_set_ignores_the_seed(tfrecord_files, tmp_path):
    for seed in (1, 2, 3):
        ds = Dataset.list_files(str(tmp_path / "*.tfrecord"), shuffle=True, seed=seed).interleave(
            TFRecordDataset, cycle_length=1)
        got = values(auto_shard(ds, 2, 0))
        assert sorted(got) == ["f0r0", "f0r1", "f2r0", "f2r1"]


def test_zip_and_concatenate_shard_every_reader_branch():
    ds = fake_files(2).concatenate(fake_files(2, records=1))
    assert values(auto_shard(ds, 2, 1)) == ["f1:r0", "f1:r1", "f1:r0"]


def test_fewer_files_than_workers_raises_with_the_counts():
    ds = with_policy(fake_files(2), AutoShardPolicy.FILE)
    with pytest.raises(InvalidArgumentError, match="only has 2 file.*3 shards/workers"):
        auto_shard(ds, 3, 0)


def test_file_policy_on_a_non_file_pipeline_raises_not_found():
    ds = with_policy(Dataset.range(10), AutoShardPolicy.FILE)
    with pytest.raises(NotFoundError, match="unshardable source dataset: Range"):
        auto_shard(ds, 2, 0)


def test_file_sharding_is_all_or_nothing_never_data_on_a_partly_rewritten_graph():
    # tf.distribute loses records here (docs/tf-behaviour.md#auto-shard); AUTO must fall back to DATA on the original graph.
    ds = fake_files(2, records=2).concatenate(Dataset.from_tensor_slices([b"x0", b"x1"]))
    w0, w1 = values(auto_shard(ds, 2, 0)), values(auto_shard(ds, 2, 1))
    assert sorted(w0 + w1) == sorted(values(ds))
    assert not set(w0) & set(w1)


def test_one_worker_file_policy_changes_nothing():
    ds = fake_files(3)
    assert values(auto_shard(ds, 1, 0)) == values(ds)


# ------------------------------------------------------------------ DATA / AUTO / HINT / OFF
def test_data_policy_shards_the_output_batches():
    ds = with_policy(Dataset.range(10).batch(3), AutoShardPolicy.DATA)
    assert values(auto_shard(ds, 2, 0)) == [[0, 1, 2], [6, 7, 8]]
    assert values(auto_shard(ds, 2, 1)) == [[3, 4, 5], [9]]


def test_data_shard_goes_before_a_trailing_prefetch():
    ds = with_policy(Dataset.range(6).prefetch(2), AutoShardPolicy.DATA)
    sharded = auto_shard(ds, 2, 0)
    assert sharded._node.kind == "WithOptions" or sharded._node.kind == "Prefetch"
    assert values(sharded) == [0, 2, 4]


def test_auto_falls_back_to_data_with_a_logged_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="jaxfeed"):
        got = values(auto_shard(Dataset.range(6), 3, 2))
    assert got == [2, 5]
    assert "AUTO fell back to DATA" in caplog.text and "Range" in caplog.text


def test_auto_uses_file_when_the_graph_reads_files():
    assert values(auto_shard(fake_files(4, records=1), 2, 0)) == ["f0:r0", "f2:r0"]


def test_data_shards_require_non_empty_as_tf_does():
    ds = with_policy(Dataset.range(3), AutoShardPolicy.DATA)
    with pytest.raises(InvalidArgumentError, match="Could not apply FILE based sharding"):
        values(auto_shard(ds, 5, 0))
    assert values(auto_shard(ds, 5, 4)) == []


def test_hint_policy_replaces_the_placeholder():
    ds = with_policy(Dataset.range(8).shard(SHARD_HINT, SHARD_HINT).map(lambda x: x * 10), AutoShardPolicy.HINT)
    assert values(auto_shard(ds, 4, 1)) == [10, 50]


def test_off_policy_gives_every_worker_everything():
    ds = with_policy(Dataset.range(4), AutoShardPolicy.OFF)
    assert values(auto_shard(ds, 2, 1)) == [0, 1, 2, 3]


def test_bad_worker_index_is_rejected():
    with pytest.raises(InvalidArgumentError, match=r"index must be in \[0, 2\), got 2"):
        auto_shard(Dataset.range(4), 2, 2)


# ------------------------------------------------------------------ the plan
def test_plan_lists_files_per_worker_and_says_why():
    plan = auto_shard_plan(fake_files(5), 2)
    assert plan.policy == AutoShardPolicy.FILE and "reads files" in plan.reason
    assert plan.workers[0].files == ["f0", "f2", "f4"] and plan.workers[1].files == ["f1", "f3"]
    assert plan.complete and plan.disjoint
    assert "worker 1: 2 file(s)" in str(plan)


def test_plan_explains_the_auto_fallback_reason():
    plan = auto_shard_plan(Dataset.range(16).batch(4), 2)
    assert plan.policy == AutoShardPolicy.DATA and "unshardable source" in plan.reason
    assert list(plan.workers[1].positions) == [1, 3]


def test_plan_raises_on_fewer_files_than_workers():
    with pytest.raises(InvalidArgumentError, match="only has 2 file"):
        auto_shard_plan(fake_files(2), 3)


def test_plan_proves_overlap_when_a_branch_misses_the_hint():
    ds = Dataset.range(4).shard(SHARD_HINT, SHARD_HINT).concatenate(Dataset.range(4))
    with pytest.raises(AutoShardError, match="overlap"):
        auto_shard_plan(with_policy(ds, AutoShardPolicy.HINT), 2)


def test_plan_proves_a_gap_when_a_source_is_sharded_twice():
    ds = Dataset.range(8).shard(SHARD_HINT, SHARD_HINT).shard(SHARD_HINT, SHARD_HINT)
    with pytest.raises(AutoShardError, match="read by no worker"):
        auto_shard_plan(with_policy(ds, AutoShardPolicy.HINT), 2)


def test_plan_flags_unseeded_shuffles_under_data_as_unprovable():
    plan = auto_shard_plan(Dataset.range(10).shuffle(10), 2)
    assert plan.disjoint is None and any("unseeded" in n for n in plan.notes)


def test_plan_matches_what_auto_shard_yields():
    ds = Dataset.range(11).batch(2)
    plan = auto_shard_plan(ds, 3)
    everything = values(ds)
    for w in plan.workers:
        assert values(auto_shard(ds, 3, w.index)) == [everything[i] for i in w.positions]
