"""The bench's main job, end to end at tiny sizes: the table, JSON and PNG come out. No timing assertions:
performance is claimed only from bench runs, as ratios measured in one run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from jaxfeed.bench import __main__ as bench_main
from jaxfeed.bench import report, runner, timing, workloads


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench-out")
    data_dir = tmp_path_factory.mktemp("bench-data")
    temp = tmp_path_factory.mktemp("bench-temp")
    argv = ["--quick", "--scale", "tiny", "--peers", "none", "--repeats", "1", "--max-seconds", "0.05",
            "--out", str(out), "--data-dir", str(data_dir), "--no-progress", "--only", "P1,P2,P3,P4,P5,P6"]
    proc = subprocess.run([sys.executable, "-m", "jaxfeed.bench", *argv], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "TMPDIR": str(temp)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out, proc.stdout, temp


def test_the_run_leaves_nothing_in_the_temp_directory(tiny_run):
    *_, temp = tiny_run
    assert sorted(p.name for p in temp.iterdir()) == []


def test_the_peers_package_folder_is_removed_at_exit(tmp_path):
    """The folder that gives peer interpreters ``jaxfeed.bench`` alone: every bench run with peers left one."""
    code = "from jaxfeed.bench import runner; import os, sys; assert os.path.isdir(runner._shim_path())"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert list(tmp_path.iterdir()) == []


def test_writes_json_png_and_text(tiny_run):
    out, stdout, _ = tiny_run
    results = json.loads((out / "bench.json").read_text())
    assert (out / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "bench.txt").read_text().strip() in stdout
    assert f"wrote {out / 'bench.json'}" in stdout
    assert set(results["pipelines"]) == {"P1", "P2", "P3", "P4", "P5", "P6"}


def test_every_pipeline_has_a_jaxfeed_and_a_hand_loop_entry(tiny_run):
    out, *_ = tiny_run
    results = json.loads((out / "bench.json").read_text())
    for key, p in results["pipelines"].items():
        assert p["runs"]["jaxfeed"]["status"] in ("ok", "skipped", "error"), key
        assert p["runs"]["hand loop"]["status"] == "ok", (key, p["runs"]["hand loop"])
        assert p["runs"]["hand loop"]["median"] > 0


def test_table_prints_min_median_max_and_the_targets(tiny_run):
    _, stdout, _ = tiny_run
    assert "median" in stdout and "min" in stdout and "max" in stdout
    assert "Targets (ratios of figures measured in this run)" in stdout
    assert "AUTOTUNE / best hand-picked num_parallel_calls" in stdout


def test_autotune_check_runs_hand_picked_settings(tiny_run):
    out, *_ = tiny_run
    results = json.loads((out / "bench.json").read_text())
    runs = results["pipelines"]["P4"]["runs"]
    assert {f"jaxfeed num_parallel_calls={n}" for n in bench_main.SWEEP} <= set(runs)
    assert runs[bench_main.TUNED]["kind"] == "tuned" and runs[bench_main.TUNED]["status"] == "ok"
    check = next(t for t in results["targets"] if t["pipeline"] == "P4" and t["target"].startswith("AUTOTUNE"))
    assert check["first_epoch"] > 0 and "first epoch, tuning from scratch" in check["detail"]


def test_hand_loops_do_the_same_work_as_the_pipelines(tmp_path):
    """Same elements (up to order where a shuffle or interleave differs), same shapes and dtypes."""
    import numpy as np

    from jaxfeed.bench import baselines, data, suite

    d = data.Loaded(data.ensure("tiny", root=str(tmp_path), log=lambda m: None))
    p1 = np.concatenate(list(baselines.p1(d)))
    assert p1.tolist() == list(range(1, d.sizes["p1_n"] + 1))
    p2 = np.concatenate(list(baselines.p2(d)))
    assert p2.shape == d.rows.shape
    assert np.array_equal(np.sort(p2[:, 0]), np.sort(d.rows[:, 0]))
    p4 = np.concatenate(list(baselines.p4(d)))
    assert p4.dtype == np.float32 and p4.shape == d.images.shape
    p5 = np.concatenate(list(baselines.p5(d)))
    assert p5.shape == (d.sizes["p5_lines"], workloads.P5_LENGTH) and p5.dtype == np.int32
    arrays, sums = zip(*baselines.p3(d))
    assert sum(len(s) for s in sums) == d.sizes["p3_files"] * d.sizes["p3_records"]
    assert all(int(a.sum()) == int(s.sum()) for a, s in zip(arrays, sums))
    p6 = list(baselines.p6(d))
    assert sum(len(b["id"]) for b in p6) == d.sizes["p6_files"] * d.sizes["p6_rows"]
    assert all(len(b["id"]) == workloads.P6_BATCH for b in p6[:-1])
    try:
        jf = np.concatenate([b for b in suite.p1(d)])
    except ImportError:
        return
    assert jf.tolist() == p1.tolist()


def test_tfrecord_framing_round_trips_and_catches_corruption(tmp_path):
    if not workloads.HAVE_CRC32C:
        pytest.skip("google-crc32c is not installed")
    path = tmp_path / "x.tfrecord"
    payloads = [b"abc", b"", bytes(range(256))]
    path.write_bytes(b"".join(workloads.frame_record(p) for p in payloads))
    assert list(workloads.read_tfrecords(str(path))) == payloads
    assert list(workloads.read_tfrecords(str(path), block=5)) == payloads  # records straddle reads
    raw = bytearray(path.read_bytes())
    raw[14] ^= 1  # a payload byte of the first record
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="corrupt record CRC"):
        list(workloads.read_tfrecords(str(path)))


def test_interleave_round_robin_follows_tf_data_cycle_order():
    out = list(workloads.interleave_round_robin([[1, 2, 3], [10, 20], [100], [1000, 2000]], 2))
    assert out == [1, 10, 2, 20, 3, 100, 1000, 2000]


def test_measure_reports_min_median_max_and_counts_rows():
    r = timing.measure(lambda: iter([[1, 2, 3], [4, 5]] * 3), repeats=3, warmup=1, count=len)
    assert r["elements"] == [15, 15, 15]
    assert r["min"] <= r["median"] <= r["max"]
    assert r["first_batch_s"] is not None


def test_targets_are_ratios_with_verdicts():
    results = {"pipelines": {"P1": {"runs": {
        "jaxfeed": {"kind": "jaxfeed", "status": "ok", "median": 3.0},
        "hand loop": {"kind": "baseline", "status": "ok", "median": 4.0},
        "torch: DataLoader workers=0": {"kind": "peer", "status": "ok", "median": 2.0}}}}}
    t = {x["target"]: x for x in report.compute_targets(results)}
    assert t["jaxfeed / hand loop (Python ints)"]["value"] == pytest.approx(0.75)
    assert t["jaxfeed / hand loop (Python ints)"]["status"] == "pass"
    assert t["jaxfeed / torch DataLoader (0 workers)"]["value"] == pytest.approx(1.5)


def test_the_autotune_check_pairs_autotune_with_the_settings_of_its_own_group():
    """AUTOTUNE timed in the settings' group (kind ``tuned``) is what the check compares, repetition by
    repetition, with the setting of the best median; the main group's jaxfeed run only where there is none."""
    runs = {"jaxfeed": {"kind": "jaxfeed", "status": "ok", "median": 50.0, "rates": [50, 50, 50]},
            "jaxfeed num_parallel_calls=AUTOTUNE": {"kind": "tuned", "status": "ok", "median": 90.0,
                                                    "rates": [90, 60, 120]},
            "jaxfeed num_parallel_calls=1": {"kind": "sweep", "status": "ok", "median": 100.0,
                                             "rates": [100, 60, 150]},
            "jaxfeed num_parallel_calls=2": {"kind": "sweep", "status": "ok", "median": 70.0,
                                             "rates": [70, 70, 70]}}
    check = lambda: next(t for t in report.compute_targets({"pipelines": {"P4": {"runs": runs, "tunable": True}}})
                         if t["target"].startswith("AUTOTUNE"))
    assert check()["value"] == pytest.approx(0.9)  # ratios 0.9, 1.0, 0.8 against num_parallel_calls=1
    assert "vs jaxfeed num_parallel_calls=1" in check()["detail"]
    del runs["jaxfeed num_parallel_calls=AUTOTUNE"]
    assert check()["value"] == pytest.approx(0.5)


def test_targets_pair_repetitions_that_ran_back_to_back():
    """The machine's speed changes from one repetition to the next; the paired ratio is the median of the
    ratios within each repetition (2.0 here), not the ratio of the medians (80 / 50); a run of fewer
    repetitions pairs with the first ones; runs without per-repetition rates fall back to the medians."""
    runs = {"jaxfeed": {"kind": "jaxfeed", "status": "ok", "median": 80.0, "rates": [100, 40, 300, 60, 80]},
            "hand loop": {"kind": "baseline", "status": "ok", "median": 50.0, "rates": [50, 20, 100, 60, 40]}}
    t = {x["target"]: x for x in report.compute_targets({"pipelines": {"P2": {"runs": runs}}})}
    assert t["jaxfeed / hand loop"]["value"] == pytest.approx(2.0)
    assert "paired; of medians 1.60" in t["jaxfeed / hand loop"]["detail"]
    runs["hand loop"]["rates"] = [50, 20, 100]  # ran the first three repetitions only (a peer in P3-P5)
    t = {x["target"]: x for x in report.compute_targets({"pipelines": {"P2": {"runs": runs}}})}
    assert t["jaxfeed / hand loop"]["value"] == pytest.approx(2.0)  # ratios 2, 2, 3
    del runs["hand loop"]["rates"]  # no per-repetition figures: the medians
    t = {x["target"]: x for x in report.compute_targets({"pipelines": {"P2": {"runs": runs}}})}
    assert t["jaxfeed / hand loop"]["value"] == pytest.approx(1.6)
    assert "paired" not in t["jaxfeed / hand loop"]["detail"]


def test_a_missing_peer_is_skipped_cleanly(tmp_path):
    """A peer whose framework is absent from the interpreter reports a skip, not an error."""
    from jaxfeed.bench import data

    path = data.ensure("tiny", root=str(tmp_path), log=lambda m: None)
    found = runner.probe_peers(sys.executable, ["tfdata", "torch", "grain"])
    missing = [p for p, v in found.items() if v is None]
    if not missing:
        pytest.skip("every peer is installed in this interpreter")
    server = runner.PeerServer(sys.executable, missing[0], "P1", path, 0.1)
    try:
        ready = server.ready(timeout=60)
    finally:
        server.close()
    assert "not installed" in ready["skipped"], ready


FAKE_PEER = """
import os, sys, time
from jaxfeed.bench.peers import _common

NAME = "fake"


def version():
    return "1.0"


def p1(sizes, paths):
    log = os.environ["FAKE_PEER_LOG"]

    def batches():
        with open(log, "a") as f:
            f.write("peer\\n")
        return iter([[1, 2, 3], [4, 5]])

    def boom():
        raise ValueError("peer variant failed")

    def die():
        os._exit(3)

    return {"ok": (batches, {"python_function": True}), "boom": (boom, {}), "die": (die, {})}


PIPELINES = {"P1": p1}

if __name__ == "__main__":
    sys.exit(_common.main(sys.modules[__name__]))
"""


def test_served_peer_takes_turns_with_local_contenders(tmp_path, monkeypatch):
    """A peer's repetitions run one at a time on request, interleaved with jaxfeed's in one group; its
    failures are that contender's error entry and the others go on; an exit is reported, not a hang."""
    from jaxfeed.bench import data

    path = data.ensure("tiny", root=str(tmp_path), log=lambda m: None)
    (tmp_path / "fake_peer.py").write_text(FAKE_PEER)
    log = tmp_path / "order.log"
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("FAKE_PEER_LOG", str(log))
    server = runner.PeerServer(sys.executable, "fake", "P1", path, 0.1, module="fake_peer")
    try:
        ready = server.ready(timeout=60)
        assert ready == {"version": "1.0", "variants": {"ok": {"python_function": True}, "boom": {}, "die": {}}}

        def local():
            with open(log, "a") as f:
                f.write("local\n")
            return iter([[0] * 10])

        out = runner.Runner(repeats=3, warmup=1).group({
            "local": (local, len), "fake: ok": (runner.PeerVariant(server, "ok", repeats=2), len),
            "fake: boom": (runner.PeerVariant(server, "boom"), len)})
        # warm-up, then repetitions 0-2, each starting one contender further along; the peer: 2 only
        assert log.read_text().split() == ["local", "peer", "local", "peer", "peer", "local", "local"]
        assert out["fake: ok"]["status"] == "ok" and out["fake: ok"]["elements"] == [5, 5]
        assert out["fake: boom"]["status"] == "error" and "peer variant failed" in out["fake: boom"]["reason"]
        assert out["local"]["elements"] == [10, 10, 10]
        with pytest.raises(runner.PeerError, match="exit 3"):
            server.once("die", timeout=60)
    finally:
        server.close()
    assert server.proc.returncode == 3


def test_vectorized_forms_and_the_numpy_scalar_loop_do_the_same_work(tmp_path):
    """The ``map(..., vectorized=True)`` forms yield what the per-element forms yield (P4: the same flips
    whether the function sees one image or a batch), and the numpy-scalar hand loop what the Python one does."""
    import numpy as np

    from jaxfeed.bench import baselines, data, suite

    d = data.Loaded(data.ensure("tiny", root=str(tmp_path), log=lambda m: None))
    p1 = np.concatenate(list(baselines.p1(d)))
    assert np.concatenate(list(baselines.p1_numpy_scalars(d))).tolist() == p1.tolist()
    try:
        from jaxfeed.pipeline import Dataset  # noqa: F401
    except ImportError:
        return
    assert np.concatenate(list(suite.p1_vectorized(d))).tolist() == p1.tolist()
    per = list(suite.p3(d, 1))
    vec = list(suite.p3_vectorized(d, 1))
    assert [len(s) for _, s in vec] == [len(s) for _, s in per]
    assert all(np.array_equal(a, b) and np.array_equal(s, t) for (a, s), (b, t) in zip(vec, per))
    vec4 = np.concatenate(list(suite.p4_vectorized(d, 1)))
    one = np.stack([workloads.augment_keyed(np.int64(i), img) for i, img in enumerate(d.images)])
    assert vec4.dtype == np.float32 and np.array_equal(vec4, one)
    flips = workloads.flips_keyed(np.arange(len(d.images)))
    assert 0.3 < flips.mean() < 0.7  # a random flip, not a constant one


def test_targets_are_judged_on_the_best_jaxfeed_form_and_show_the_other():
    results = {"pipelines": {"P1": {"runs": {
        "jaxfeed": {"kind": "jaxfeed", "status": "ok", "median": 3.0},
        "jaxfeed (vectorized)": {"kind": "jaxfeed", "status": "ok", "median": 30.0},
        "hand loop": {"kind": "baseline", "status": "ok", "median": 10.0},
        "hand loop over numpy int64 scalars": {"kind": "baseline", "status": "ok", "median": 5.0}}}}}
    t = {x["target"]: x for x in report.compute_targets(results)}
    judged = t["jaxfeed / hand loop (Python ints)"]
    assert judged["value"] == pytest.approx(3.0) and judged["status"] == "pass"
    assert judged["forms"] == {"jaxfeed": pytest.approx(0.3), "jaxfeed (vectorized)": pytest.approx(3.0)}
    assert "jaxfeed: 0.30" in judged["detail"]
    info = t["jaxfeed / hand loop over numpy int64 scalars"]
    assert info["status"] == "info" and info["judged"] is False and info["value"] == pytest.approx(6.0)


def test_formats_section_runs_with_only_formats(tmp_path):
    argv = ["--scale", "tiny", "--peers", "none", "--repeats", "1", "--max-seconds", "0.2", "--out",
            str(tmp_path / "out"), "--data-dir", str(tmp_path / "data"), "--no-progress", "--only", "formats"]
    proc = subprocess.run([sys.executable, "-m", "jaxfeed.bench", *argv], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads((tmp_path / "out" / "bench.json").read_text())
    assert results["pipelines"] == {}
    f = results["formats"]
    assert f["status"] in ("ok", "skipped"), f
    if f["status"] == "ok":
        assert f["tfrecord"]["next_many_records_per_s"] > 0 and f["parquet"]["read_table_rows_per_s"] > 0
        assert "TFRecordDataset next_many" in proc.stdout and "pyarrow.parquet.read_table" in proc.stdout


def test_the_image_section_measures_jaxfeed_ops_and_reports_tf_as_skipped_without_it():
    import numpy as np

    from jaxfeed.bench import images, report

    figures = images.run(images=3, repeats=1, peer_python=None)
    assert figures["jaxfeed_images_per_s"] > 0 and "tensorflow" not in figures
    text = "\n".join(report.images_table({**figures, "status": "ok"}))
    assert "jaxfeed.ops" in text and "not run" in text
    out = images.jaxfeed_transform(images.make_jpegs(1)[0], (0, 0))
    assert out.shape == (images.OUT, images.OUT, 3) and out.dtype == np.float32 and 0 <= out.min() <= out.max() <= 1


def test_the_service_section_is_reported_or_skipped_with_its_reason():
    from jaxfeed.bench import report

    skipped = report.service_table({"status": "skipped", "reason": "ray is not installed"})
    assert "skipped: ray is not installed" in "\n".join(skipped)
    figures = {"status": "ok", "local_images_per_s": 100.0, "service_1_images_per_s": 150.0,
               "service_2_images_per_s": 270.0, "scaling_2_vs_1": 1.8, "hop_us_per_element": 40.0,
               "work_us_per_element": 5000.0, "split_size": 256,
               "sizing": [{"devices": 8, "per_device": 2000.0, "worker_cores": 80, "consumer_core_fraction": 0.64}]}
    text = "\n".join(report.service_table(figures))
    assert "1.80x" in text and "80 worker cores" in text and "40 us" in text


def test_every_as_ported_form_runs_next_to_the_best_form(tiny_run):
    """Issue 19: each pipeline's as-ported form (written exactly as for tf.data) is measured in the same run
    as its best form, and its targets are computed from the run the bench names as the as-ported one."""
    out, stdout, _ = tiny_run
    results = json.loads((out / "bench.json").read_text())
    named = {key: p.get("as_ported") for key, p in results["pipelines"].items()}
    assert named == {"P1": "jaxfeed", "P2": None, "P3": "jaxfeed", "P4": bench_main.AS_PORTED,
                     "P5": bench_main.AS_PORTED, "P6": bench_main.AS_PORTED}
    for key, label in named.items():
        if label is not None:
            run = results["pipelines"][key]["runs"][label]
            assert run["status"] == "ok" and run["median"] > 0, (key, run)
    assert results["pipelines"]["P6"]["runs"][report.HAND_GEN]["status"] == "ok"
    assert results["pipelines"]["P4"]["runs"][report.HAND_2T]["status"] == "ok"
    targets = {(t["pipeline"], t["target"]): t for t in results["targets"]}
    for key in ("P1", "P3", "P4", "P5", "P6"):
        hand = next(t for (k, name), t in targets.items() if k == key and name.startswith("as ported / hand loop"))
        assert hand["value"] > 0 and named[key] in hand["detail"], hand
    assert targets[("P3", "as ported time to first batch / hand loop's")]["value"] > 0
    assert "As ported (written exactly as for tf.data" in stdout


def test_the_as_ported_forms_do_the_same_work_as_the_hand_loops(tmp_path):
    import numpy as np

    from jaxfeed.bench import baselines, data, suite

    d = data.Loaded(data.ensure("tiny", root=str(tmp_path), log=lambda m: None))
    p4 = np.concatenate(list(suite.p4_as_ported(d, 2)))
    expected = np.stack([workloads.augment(img, workloads.flip_for(i)) for i, img in enumerate(d.images)])
    assert p4.dtype == np.float32 and np.array_equal(p4, expected)
    assert np.array_equal(np.concatenate(list(baselines.p4_two_threads(d))), expected)  # in order
    p5 = np.concatenate(list(suite.p5_as_ported(d)))
    assert np.array_equal(p5, np.concatenate(list(baselines.p5(d))))
    rows = list(suite.p6_as_ported(d))
    by_hand = list(baselines.p6_generator_rows(d))
    assert all(len(b["id"]) == workloads.P6_BATCH for b in rows[:-1])
    for name, _ in baselines.P6_COLUMNS:  # the same rows (interleaved files: in another order)
        ours = np.concatenate([b[name] for b in rows])
        theirs = np.concatenate([b[name] for b in by_hand])
        assert ours.dtype == theirs.dtype, name
        order, hand_order = np.argsort(np.concatenate([b["id"] for b in rows])), np.argsort(
            np.concatenate([b["id"] for b in by_hand]))
        assert ours[order].tolist() == theirs[hand_order].tolist(), name


def test_as_ported_targets_read_the_named_run_and_the_same_function_peers():
    runs = {"jaxfeed": {"kind": "jaxfeed", "status": "ok", "median": 100.0},
            "jaxfeed as ported": {"kind": "jaxfeed", "status": "ok", "median": 30.0, "first_batch_s": 0.004},
            "hand loop": {"kind": "baseline", "status": "ok", "median": 40.0, "first_batch_s": 0.002},
            "torch: DataLoader workers=0": {"kind": "peer", "status": "ok", "median": 20.0, "python_function": True},
            "tfdata: map -> batch": {"kind": "peer", "status": "ok", "median": 60.0}}
    results = {"pipelines": {"P4": {"runs": runs, "as_ported": "jaxfeed as ported"}}}
    t = {x["target"]: x for x in report.compute_targets(results)}
    assert t["as ported / hand loop"]["value"] == pytest.approx(0.75)
    assert t["as ported / hand loop"]["status"] == "MISS"
    same = t["as ported / best peer running the Python function"]
    assert same["value"] == pytest.approx(1.5) and "torch: DataLoader workers=0" in same["detail"]
    assert t["jaxfeed / best peer"]["value"] == pytest.approx(100 / 60)  # the best form, any peer
    text = "\n".join(report.as_ported_table(results))
    assert "30" in text and "0.75x" in text and "1.50x" in text


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="Linux /proc")
def test_the_memory_probe_counts_what_child_processes_grow_by():
    """P5's map runs in worker processes: the peak RSS of the consumer alone left their memory out."""
    pytest.importorskip("psutil")
    from jaxfeed.bench import memory

    code = ("import sys; sys.stdin.readline(); x = bytearray(24 << 20)\n"
            "for i in range(0, len(x), 4096): x[i] = 1\n"
            "print('grown', flush=True); sys.stdin.readline()")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        with memory.WorkerMemory() as sampled:
            child.stdin.write("grow\n")
            child.stdin.flush()
            assert child.stdout.readline().strip() == "grown"
        assert 24 << 20 <= sampled.delta < 40 << 20
    finally:
        child.kill()
        child.wait(60)


def test_the_memory_target_judges_the_consumer_and_its_workers_together():
    mib = 1 << 20
    pipeline = {"runs": {}, "in_flight_bytes": 4 * mib,
                "memory": {"status": "ok", "rss_delta": 2 * mib, "workers_delta": 7 * mib}}
    (entry,) = [t for t in report.compute_targets({"pipelines": {"P5": pipeline}}) if "RSS" in t["target"]]
    assert entry["value"] == pytest.approx(9 / 4) and entry["status"] == "MISS"
    assert "7.0 MiB of it in child processes" in entry["detail"]
    del pipeline["memory"]["workers_delta"]  # (a run from before workers were counted)
    (entry,) = [t for t in report.compute_targets({"pipelines": {"P5": pipeline}}) if "RSS" in t["target"]]
    assert entry["value"] == pytest.approx(0.5) and entry["status"] == "pass"
