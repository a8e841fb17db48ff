"""examples/flax_optax_training.py: a run stopped at a checkpoint and resumed in a new process ends with the
same parameters, bit for bit, as an uninterrupted run (needs flax, optax and orbax-checkpoint)."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("flax")
pytest.importorskip("optax")
pytest.importorskip("orbax.checkpoint")

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "flax_optax_training.py")


def _run(*args):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    proc = subprocess.run([sys.executable, EXAMPLE, "--devices", "4", "--steps", "16", *args], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_a_resumed_run_ends_bit_identical_to_an_uninterrupted_one(tmp_path):
    full, resumed, ckpt = tmp_path / "full.json", tmp_path / "resumed.json", str(tmp_path / "ckpt")
    _run("--out", str(full))
    _run("--stop-at", "6", "--ckpt", ckpt)
    _run("--resume", "--ckpt", ckpt, "--out", str(resumed))
    a, b = json.loads(full.read_text()), json.loads(resumed.read_text())
    assert b["first_step"] == 6 and len(b["losses"]) == 10
    assert a["losses"][6:] == b["losses"]
    assert a["params_sha256"] == b["params_sha256"]
