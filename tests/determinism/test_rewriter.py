"""The deterministic-mode rewriter, decision by decision (read through Dataset.explain / iterator.rewrites)."""

import logging
import os
import time

import numpy as np
import pytest

from jaxfeed import determinism
from jaxfeed.pipeline import AUTOTUNE, Dataset, Options, graph
from jaxfeed.pipeline.errors import UnimplementedError
from jaxfeed.pipeline.testing import assert_elements_equal


def rewritten(ds):
    """(the rewritten graph's nodes, sources first; the pass log entries) for a dataset."""
    it = iter(ds)
    nodes = list(graph.walk(it.graph))
    entries = [(label, why) for name, label, why in it.rewrites if name == "make_deterministic"]
    it.close()
    return nodes, entries


def of_kind(nodes, kind):
    return [n for n in nodes if n.kind == kind]


@pytest.fixture
def on():
    determinism.enable_op_determinism()
    determinism.set_random_seed(7)


def test_pass_changes_nothing_when_determinism_is_off():
    ds = Dataset.range(8).map(lambda x: x + np.random.rand(), num_parallel_calls=2, deterministic=False).prefetch(2)
    nodes, entries = rewritten(ds)
    assert entries == []
    assert of_kind(nodes, "Map")[0].num_parallel_calls == 2
    assert of_kind(nodes, "Prefetch")


def test_deterministic_false_argument_is_forced_true(on):
    ds = Dataset.range(8).map(lambda x: x * 2, num_parallel_calls=2, deterministic=False)
    nodes, entries = rewritten(ds)
    (m,) = of_kind(nodes, "Map")
    assert m.deterministic is True and m.num_parallel_calls == 2
    assert any("deterministic=False forced to True" in why for _, why in entries)


def test_options_deterministic_false_is_forced_true(on):
    opts = Options()
    opts.deterministic = False
    ds = Dataset.range(8).map(lambda x: x, num_parallel_calls=2).with_options(opts)
    it = iter(ds)
    assert it._ctx.options.deterministic is True
    assert any("Options.deterministic=False" in why for _, _, why in it.rewrites)
    it.close()


def test_stateful_parallel_map_runs_serially(on):
    ds = Dataset.range(8).map(lambda x: x + np.random.randint(3), num_parallel_calls=4)
    nodes, entries = rewritten(ds)
    (m,) = of_kind(nodes, "Map")
    assert m.num_parallel_calls is None
    (label, why), = entries
    assert label.startswith("Map(") and "runs serially" in why and "numpy.random.randint" in why


def test_per_element_rng_map_stays_parallel(on):
    ds = Dataset.range(8).map(lambda x, rng: x + rng.integers(3), num_parallel_calls=4, with_rng=True)
    nodes, entries = rewritten(ds)
    assert of_kind(nodes, "Map")[0].num_parallel_calls == 4
    assert entries == []


def test_pure_parallel_map_stays_parallel(on):
    ds = Dataset.range(8).map(lambda x: np.sqrt(x), num_parallel_calls=AUTOTUNE).prefetch(2)
    nodes, entries = rewritten(ds)
    assert of_kind(nodes, "Map")[0].num_parallel_calls == AUTOTUNE
    assert of_kind(nodes, "Prefetch") and entries == []


def test_prefetch_above_a_stateful_function_is_removed(on):
    ds = Dataset.range(8).map(lambda x: x + np.random.rand()).prefetch(4)
    nodes, entries = rewritten(ds)
    assert of_kind(nodes, "Prefetch") == []
    assert any(label.startswith("Prefetch") and "prefetch removed" in why for label, why in entries)


def test_parallel_stage_above_a_stateful_function_becomes_serial(on):
    ds = Dataset.range(8).map(lambda x: x + np.random.rand()).map(np.sqrt, num_parallel_calls=2)
    nodes, entries = rewritten(ds)
    assert all(m.num_parallel_calls is None for m in of_kind(nodes, "Map"))  # (map fusion may merge them)
    assert any("stateful function below it" in why for _, why in entries)


def test_parallel_stage_below_a_stateful_function_stays_parallel(on):
    ds = Dataset.range(8).map(np.sqrt, num_parallel_calls=2).prefetch(1).map(lambda x: x + np.random.rand())
    nodes, _ = rewritten(ds)
    first, second = of_kind(nodes, "Map")
    assert first.num_parallel_calls == 2 and second.num_parallel_calls is None
    assert of_kind(nodes, "Prefetch")


def test_declared_stateless_function_stays_parallel(on):
    ds = Dataset.range(8).map(lambda x: x + 0 * np.random.rand(), num_parallel_calls=2, stateful=False).prefetch(1)
    nodes, entries = rewritten(ds)
    assert of_kind(nodes, "Map")[0].num_parallel_calls == 2 and entries == []


def test_declared_stateful_function_runs_serially(on):
    ds = Dataset.range(8).map(lambda x: x, num_parallel_calls=2, stateful=True)
    nodes, entries = rewritten(ds)
    assert of_kind(nodes, "Map")[0].num_parallel_calls is None
    assert "declared stateful=True" in entries[0][1]


def test_stateful_interleave_runs_serially_and_keeps_its_cycle(on):
    def inner(x):
        return Dataset.from_tensor_slices(np.full(3, x) + np.random.randint(2))

    ds = Dataset.range(6).interleave(inner, num_parallel_calls=2)
    plain = Dataset.range(6).interleave(lambda x: Dataset.from_tensor_slices(np.full(3, x)), num_parallel_calls=2)
    nodes, entries = rewritten(ds)
    (node,) = of_kind(nodes, "Interleave")
    assert node.num_parallel_calls is None and node.cycle == plain._node.cycle
    assert "runs serially" in entries[0][1]


def test_stateful_filter_is_reported_and_its_consumers_made_synchronous(on):
    ds = Dataset.range(8).filter(lambda x: np.random.rand() < 2).prefetch(2)
    nodes, entries = rewritten(ds)
    assert of_kind(nodes, "Prefetch") == []
    assert any(label.startswith("Prefetch") for label, _ in entries)


def test_deterministic_pipeline_yields_the_same_after_the_rewrite(on):
    def build():
        return (Dataset.range(40).shuffle(10).map(lambda x: x * 3, num_parallel_calls=2, deterministic=False)
                .batch(4).prefetch(2))

    expected = list(build())
    determinism.disable_op_determinism()
    assert_elements_equal(list(build()), expected)


def test_rewrite_is_logged_naming_the_node(on, caplog):
    ds = Dataset.range(4).map(lambda x: x + np.random.rand(), num_parallel_calls=2)
    with caplog.at_level(logging.INFO, logger="jaxfeed.determinism"):
        list(ds)
    assert any("Map(" in r.getMessage() and "runs serially" in r.getMessage() for r in caplog.records)


def test_explain_shows_the_rewrites(on):
    text = Dataset.range(4).map(lambda x: x + np.random.rand(), num_parallel_calls=2).explain()
    assert "[make_deterministic]" in text and "runs serially" in text


# ------------------------------------------------------------------------------------------- seeds
def test_unseeded_shuffle_raises_at_construction_when_enabled():
    determinism.enable_op_determinism()
    with pytest.raises(RuntimeError, match="set_random_seed"):
        Dataset.range(4).shuffle(4)


def test_unseeded_shuffle_built_before_enabling_raises_at_iteration():
    ds = Dataset.range(4).shuffle(4)
    determinism.enable_op_determinism()
    with pytest.raises(RuntimeError, match=r"Random ops require a seed.*Shuffle"):
        iter(ds)


def test_op_seed_alone_is_enough():
    determinism.enable_op_determinism()
    assert sorted(int(x) for x in Dataset.range(4).shuffle(4, seed=3)) == [0, 1, 2, 3]


def test_unseeded_per_element_rng_map_raises():
    ds = Dataset.range(4).map(lambda x, rng: x, with_rng=True)
    determinism.enable_op_determinism()
    with pytest.raises(RuntimeError, match="set_random_seed"):
        iter(ds)


# ------------------------------------------------------------------------------ no deterministic version
@pytest.mark.parametrize("fn, op", [
    (lambda x: np.frombuffer(os.urandom(8), np.int64)[0], "os.urandom"),
    (lambda x: x + int(time.time()), "time.time"),
    (lambda x: x + np.random.default_rng().integers(3), "default_rng"),
])
def test_operation_without_deterministic_implementation_raises_unimplemented(on, fn, op):
    ds = Dataset.range(4).map(fn)
    with pytest.raises(UnimplementedError, match=op) as info:
        iter(ds)
    assert "Map(" in str(info.value)


def test_unimplemented_operation_declared_stateless_is_allowed(on):
    ds = Dataset.range(4).map(lambda x: (x, time.time())[0], stateful=False)
    assert [int(x) for x in ds] == [0, 1, 2, 3]


def test_explain_decisions_lists_each_node_without_raising():
    ds = Dataset.range(4).shuffle(4).map(lambda x: x + np.random.rand(), num_parallel_calls=2)
    rows = determinism.rewriter.explain_decisions(ds)
    assert [r["kind"] for r in rows] == ["Range", "Shuffle", "Map"]
    assert rows[1]["random"] and not rows[1]["seeded"]
    assert rows[2]["parallel"] and "numpy.random.rand" in rows[2]["stateful"]["map_func"]


def test_stateful_reason_tells_outside_consumers_to_read_synchronously(on):
    from jaxfeed.determinism.rewriter import stateful_reason

    assert stateful_reason(Dataset.range(3).map(np.sqrt)._node) is None
    assert "numpy.random.rand" in stateful_reason(Dataset.range(3).map(lambda x: x + np.random.rand())._node)
    determinism.disable_op_determinism()
    assert stateful_reason(Dataset.range(3).map(lambda x: x + np.random.rand())._node) is None
