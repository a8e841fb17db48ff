"""jaxfeed iterators in an orbax CheckpointManager step, beside the model (skipped without orbax)."""

import numpy as np
import pytest

ocp = pytest.importorskip("orbax.checkpoint")

from jaxfeed.distribute.orbax_handler import JaxfeedCheckpointRestore, JaxfeedCheckpointSave  # noqa: E402
from jaxfeed.pipeline import Dataset  # noqa: E402
from jaxfeed.pipeline.errors import FailedPreconditionError  # noqa: E402


def _pipeline():
    return Dataset.range(100).shuffle(30, seed=1).map(lambda x: x * 3).batch(7)


def test_the_iterator_resumes_with_the_model_from_one_manager_step(tmp_path):
    want = [b.tolist() for b in _pipeline()]
    it = iter(_pipeline())
    seen = [next(it).tolist() for _ in range(4)]
    params = {"w": np.arange(6.0).reshape(2, 3)}
    with ocp.CheckpointManager(tmp_path) as manager:
        manager.save(4, args=ocp.args.Composite(params=ocp.args.StandardSave(params),
                                                data=JaxfeedCheckpointSave(it)))
        manager.wait_until_finished()
    seen += [next(it).tolist() for _ in range(3)]  # the run goes on after the save

    fresh = iter(_pipeline())
    with ocp.CheckpointManager(tmp_path) as manager:
        restored = manager.restore(manager.latest_step(), args=ocp.args.Composite(
            params=ocp.args.StandardRestore(params), data=JaxfeedCheckpointRestore(fresh)))
    np.testing.assert_array_equal(restored.params["w"], params["w"])
    assert seen[:4] + [b.tolist() for b in restored.data] == want


def test_a_checkpoint_of_another_pipeline_is_refused(tmp_path):
    it = iter(_pipeline())
    next(it)
    with ocp.CheckpointManager(tmp_path) as manager:
        manager.save(1, args=ocp.args.Composite(data=JaxfeedCheckpointSave(it)))
        manager.wait_until_finished()
    other = iter(Dataset.range(100).batch(7))
    with ocp.CheckpointManager(tmp_path) as manager, pytest.raises(FailedPreconditionError, match="different pipeline"):
        manager.restore(1, args=ocp.args.Composite(data=JaxfeedCheckpointRestore(other)))


def test_a_checkpoint_of_another_process_count_is_refused(tmp_path):
    it = iter(_pipeline())
    with ocp.CheckpointManager(tmp_path) as manager:
        manager.save(1, args=ocp.args.Composite(data=JaxfeedCheckpointSave(it)))
        manager.wait_until_finished()
    step_dir = next(p for p in tmp_path.rglob("process_0-of-1.jfstate")).parent
    step_dir.joinpath("process_0-of-1.jfstate").rename(step_dir / "process_0-of-2.jfstate")
    with ocp.CheckpointManager(tmp_path) as manager, pytest.raises(FailedPreconditionError, match="process count"):
        manager.restore(1, args=ocp.args.Composite(data=JaxfeedCheckpointRestore(iter(_pipeline()))))
