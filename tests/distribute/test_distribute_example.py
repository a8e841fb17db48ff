"""The end-to-end example trains the same model on 8 replicas as on 1 (in this process, 8 forced devices)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "examples"))
import train_mlp  # noqa: E402


def test_eight_replicas_give_the_one_device_loss_curve_up_to_reduction_order():
    eight = train_mlp.main(["--devices", "8", "--steps", "8"])
    one = train_mlp.main(["--devices", "1", "--steps", "8"])
    assert eight["replicas"] == 8 and one["replicas"] == 1
    assert eight["losses"][-1] < eight["losses"][0]
    assert eight["losses"] == pytest.approx(one["losses"], rel=1e-5)


def test_training_from_tfrecord_files_gives_the_same_losses_as_from_memory(tmp_path):
    memory = train_mlp.main(["--devices", "8", "--steps", "4"])
    files = train_mlp.main(["--devices", "8", "--steps", "4", "--tfrecord", str(tmp_path / "data")])
    assert len(os.listdir(tmp_path / "data")) == 4
    assert files["losses"][0] == pytest.approx(memory["losses"][0], rel=0.5)  # same data, other order
    assert files["losses"][-1] < files["losses"][0]
