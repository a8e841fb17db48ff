"""P7's distributed feed and its training-loop stall check run end to end at tiny sizes (8 forced CPU
devices, in a process of their own). No timing assertions: figures are claimed only from bench runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import pytest

from jaxfeed.bench import distributed, report


def test_p7_reports_the_hand_loop_and_the_stall_for_each_batch_size(tmp_path):
    from jaxfeed.bench import data

    path = data.ensure("tiny", root=str(tmp_path), log=lambda m: None)
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=distributed.XLA_FLAG)
    proc = subprocess.run([sys.executable, "-m", "jaxfeed.bench.distributed", path, "--repeats", "1",
                           "--max-seconds", "0.1", "--stall-batch-sizes", "256,1024"],
                          capture_output=True, text=True, env=env, timeout=240, cwd=tempfile.gettempdir())
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(l for l in proc.stdout.splitlines() if l.startswith(distributed.MARKER))
    out = json.loads(line[len(distributed.MARKER):])
    assert out["devices"] == distributed.DEVICES
    assert out["runs"]["hand loop"]["status"] == "ok"
    if out["runs"].get("jaxfeed", {}).get("status") == "skipped":
        pytest.skip(out["runs"]["jaxfeed"]["reason"])
    assert set(out["stall"]) == {"256", "1024"}, out["stall"]
    for figures in out["stall"].values():
        assert 0 <= figures["stall_pct"] <= 100 and figures["steps"] >= 20 and figures["hidden"] >= 8
        assert figures["feed_ms_per_step"] > 0 and figures["step_ms_alone"] > 0
    targets = report.stall_targets("P7", out["stall"])
    assert [t["target"] for t in targets] == [f"training loop: input stall % of step time, batch {b}"
                                              for b in ("256", "1024")]
    assert all(t["status"] in ("pass", "MISS") and t["op"] == "<=" for t in targets)


def test_a_failed_stall_check_is_reported_not_raised():
    (t,) = report.stall_targets("P7", {"status": "error", "reason": "boom"})
    assert t["status"] == "n/a" and t["detail"] == "boom"
