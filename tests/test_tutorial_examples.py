"""The ported tf.distribute tutorials in examples/ give TF's numbers and exit cleanly, run after run.

- ``custom_training_tutorial.py``: the custom-training loop with train and test metrics. Its test metrics
  count the 121 test examples (not the 128 rows of the zero-padded last step), equal a plain numpy
  evaluation of the final parameters, and 4 replicas give the numbers of 1 device with the same global batch.
- ``distributed_input_tutorial.py``: each section's output is what the tutorial prints with TF on 2 devices.
Each is run several times as a fresh process (3 in the default run, 10 under ``-m slow``): the status must be
0 every time (no abort at exit).
"""

import importlib.util
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
HANG_GUARD_S = 300  # a hang guard only


def run_example(name, *args, out=None):
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "TF_CONFIG")}
    cmd = [sys.executable, os.path.join(EXAMPLES, name), *args] + (["--out", str(out)] if out else [])
    try:
        p = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{name} {' '.join(args)}: still running after {HANG_GUARD_S}s")
    log = p.stdout.decode(errors="replace") + p.stderr.decode(errors="replace")
    assert p.returncode == 0, f"{name}: exit status {p.returncode}" + \
        (" (SIGABRT)" if p.returncode == -signal.SIGABRT else "") + f"\n{log[-4000:]}"
    assert "terminate called" not in log, log[-4000:]
    return json.loads(out.read_text()) if out else log


def load_example(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(EXAMPLES, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------------- custom training
def numpy_test_metrics(params):
    """Test loss and accuracy of the final parameters over the whole test set, without any distribution."""
    (_, _), (x, y) = load_example("custom_training_tutorial").make_data()
    w1, b1, w2, b2 = (np.asarray(p, np.float64) for p in params)
    logits = np.tanh(x @ w1 + b1) @ w2 + b2
    logp = logits - logits.max(axis=1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(axis=1, keepdims=True))
    return float(-logp[np.arange(len(y)), y].mean()), float((logits.argmax(axis=1) == y).mean()), len(y)


def test_custom_training_tutorial_test_metrics_count_the_true_examples(tmp_path):
    result = run_example("custom_training_tutorial.py", "--devices", "4", out=tmp_path / "r4.json")
    assert result["replicas"] == 4 and result["global_batch_size"] == 64
    loss, accuracy, n = numpy_test_metrics(result["params"])
    assert n == 121
    for epoch in result["history"]:
        assert epoch["test_examples"] == epoch["test_accuracy_examples"] == 121  # TF's count, not 128
        assert epoch["train_examples"] == 1000 and epoch["train_steps"] == 16  # ceil(1000 / 64) steps
    last = result["history"][-1]
    assert last["test_loss"] == pytest.approx(loss, rel=1e-5)
    assert abs(last["test_accuracy"] - accuracy) <= 1 / 121 + 1e-9  # a float near-tie may flip one example
    # the same global batch on one device (no padding anywhere) gives the same training
    single = run_example("custom_training_tutorial.py", "--devices", "1", "--batch-per-replica", "64",
                         out=tmp_path / "r1.json")
    for a, b in zip(result["history"], single["history"]):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-5)
        assert a["test_loss"] == pytest.approx(b["test_loss"], rel=1e-5)
        assert a["test_examples"] == b["test_examples"] == 121


def repeated_runs(name, runs, tmp_path):
    for i in range(runs):
        run_example(name, out=tmp_path / f"run{i}.json")


@pytest.mark.slow  # (each run_example checks the exit: the default run has the metrics test's two)
def test_custom_training_tutorial_exits_cleanly_run_after_run(tmp_path):
    repeated_runs("custom_training_tutorial.py", 1, tmp_path)  # + the two runs above (10 runs: -m slow)


@pytest.mark.slow
def test_custom_training_tutorial_exits_cleanly_in_ten_of_ten_runs(tmp_path):
    repeated_runs("custom_training_tutorial.py", 10, tmp_path)


# ---------------------------------------------------------------------------------- distributed input
def test_distributed_input_tutorial_prints_tfs_values(tmp_path):
    r = run_example("distributed_input_tutorial.py", out=tmp_path / "r.json")
    assert r["first_step_rows"] == [8, 8]
    assert r["data_sharded_steps"] == 4
    assert r["from_function_shapes"] == [[[4, 16, 1], [0, 16, 1]]]  # one element of 4: replica 1 gets none
    losses = r["for_loop_losses"]
    assert len(losses) == 7 and [len(v) for v in losses[-1]] == [2, 2]  # 100 = 6 x 16 + 4
    assert all(x == [pytest.approx(0.7)] for step in losses for rep in step for x in rep)
    assert r["iter_next_steps"] == 50
    assert r["optional_loop"] == [[[0, 1], [2, 3]], [[4, 5], [6, 7]], [[8], []]]
    assert r["element_spec"].count("PerReplicaSpec") == 2 and "shape=(None, 1)" in r["element_spec"]
    assert r["element_spec_output_len"] == 4  # 2 * (features, labels) repeats the tuple, as in TF
    assert r["element_spec_last_output"] == [[[1.0]] * 8, [[1.0]] * 8]
    # StringLookup(["a", "b", "c", "d", "f"]) over "a", "c", "e", ...: a=1, c=3, e (out of vocabulary)=0
    assert r["preprocessed_batches"] == [[[1, 3], [0, 1]], [[3, 0], [1, 3]], [[0, 1], [3, 0]]]


@pytest.mark.slow  # (each run_example checks the exit: the default run has the values test's)
def test_distributed_input_tutorial_exits_cleanly_run_after_run(tmp_path):
    repeated_runs("distributed_input_tutorial.py", 1, tmp_path)  # + the run above: 2 (10 runs: -m slow)


@pytest.mark.slow
def test_distributed_input_tutorial_exits_cleanly_in_ten_of_ten_runs(tmp_path):
    repeated_runs("distributed_input_tutorial.py", 10, tmp_path)
