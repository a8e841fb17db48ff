"""``python -m jaxfeed.bench`` (or ``jaxfeed-bench``): the README's main job.

Generates synthetic data (cached), runs the reference suite P1-P7 on jaxfeed, the hand-written loops and
the installed peers (tf.data, PyTorch DataLoader, Grain; each in its own process), prints a table of
elements/s with ratios and the targets, and writes JSON, text and a PNG chart to ``--out``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

from . import data, report, runner, suite, workloads
from .workloads import rows_of

VECTORIZED = "jaxfeed (vectorized)"  # the same pipeline with its map declared vectorized=True
AS_PORTED = "jaxfeed as ported"  # the pipeline written exactly as for tf.data (where "jaxfeed" is not that)
READ_STAGE = "jaxfeed read stage: interleave(4) -> batch(256), CRC on"  # P3 without the parse
FORMATS = "FORMATS"  # --only key of the reader section (bench/formats.py)
IMAGES = "IMAGES"  # --only key of the image decode+augment section (bench/images.py)
IMAGES_SIZES = {"full": (300, 3), "quick": (100, 2), "tiny": (10, 1)}  # images, repetitions (best of)
SERVICE = "SERVICE"  # --only key of the jaxfeed.service section (bench/service.py)
SERVICE_SIZES = {"full": (2048, 3), "quick": (1024, 2), "tiny": (256, 1)}  # images, repetitions (median of)
# bench/formats.run() sizes per scale: TFRecord MiB, Parquet rows, repetitions (best of)
FORMATS_SIZES = {"full": (128, 2_000_000, 3), "quick": (32, 500_000, 2), "tiny": (2, 20_000, 1)}
SWEEP = (1, 2, 4)  # hand-picked num_parallel_calls settings for the AUTOTUNE check
TUNED = "jaxfeed num_parallel_calls=AUTOTUNE"  # jaxfeed's pipeline (built anew) in the AUTOTUNE check's group


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m jaxfeed.bench", description=__doc__.split("\n\n")[1])
    p.add_argument("--quick", action="store_true", help="smaller data and fewer repetitions (1-2 minutes)")
    p.add_argument("--scale", choices=sorted(workloads.SIZES), help="data sizes (default: full, quick with --quick)")
    p.add_argument("--only", default=",".join(suite.ORDER + [FORMATS.lower(), IMAGES.lower(), SERVICE.lower()]),
                   help="pipelines to run, e.g. P1,P3; 'formats': the reader section; 'images': jaxfeed.ops "
                        "against tf.image; 'service': jaxfeed.service on Ray (default: all)")
    p.add_argument("--repeats", type=int, help="timed repetitions after one warm-up (default 5, 3 with --quick)")
    p.add_argument("--autotune-repeats", type=int,
                   help="repetitions of jaxfeed's contenders in the pipelines with an AUTOTUNE check (P3-P5), "
                        "whose settings differ by less than this machine's noise (default 9, 5 with --quick; "
                        "never fewer than --repeats; peers there keep --repeats)")
    p.add_argument("--max-seconds", type=float,
                   help="stop a repetition after this long and rate the prefix (default 2, 1 with --quick)")
    p.add_argument("--out", default="bench-results", help="folder for bench.json / bench.txt / bench.png")
    p.add_argument("--peers", default="auto", help="auto | none | a list of tfdata,torch,grain")
    p.add_argument("--peer-python", default=runner.default_peer_python(),
                   help="interpreter for the peers (default $JAXFEED_PEER_PYTHON or this one)")
    p.add_argument("--data-dir", default=None, help=f"data cache (default {data.default_root()})")
    p.add_argument("--no-autotune-check", action="store_true", help="skip the num_parallel_calls sweep")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    args.peer_python = runner.resolve_python(args.peer_python)
    args.scale = args.scale or ("quick" if args.quick else "full")
    args.repeats = args.repeats or (3 if args.quick else 5)
    args.autotune_repeats = max(args.repeats, args.autotune_repeats or (5 if args.quick else 9))
    args.max_seconds = args.max_seconds or (1.0 if args.quick else 2.0)
    args.only = [k.strip().upper() for k in args.only.split(",") if k.strip()]
    unknown = [k for k in args.only if k not in suite.ORDER and k not in (FORMATS, IMAGES, SERVICE)]
    if unknown:
        p.error(f"--only: unknown pipeline(s) {unknown}; choose from "
                f"{suite.ORDER + [FORMATS.lower(), IMAGES.lower(), SERVICE.lower()]}")
    return args


def select_peers(args, log):
    if args.peers == "none":
        return []
    names = list(runner.PEERS) if args.peers == "auto" else [n.strip() for n in args.peers.split(",") if n.strip()]
    bad = [n for n in names if n not in runner.PEERS]
    if bad:
        raise SystemExit(f"--peers: unknown peer(s) {bad}; choose from {list(runner.PEERS)}")
    found = runner.probe_peers(args.peer_python, names)
    for n in names:
        if found.get(n):
            log(f"peer {n}: {found[n]} ({args.peer_python})")
        else:
            log(f"peer {n}: skipped, {runner.PEERS[n][1]} is not installed in {args.peer_python} "
                f"(pip install '.[compare]', or give --peer-python)")
    return [n for n in names if found.get(n)]


def plan(args, d, peers, results):
    """The list of (label, run) tasks; each run fills ``results``."""
    r = runner.Runner(repeats=args.repeats, max_seconds=args.max_seconds)
    tasks = []
    sizes = d.sizes

    for key in args.only:
        if key == FORMATS:
            tasks.append(("formats: TFRecord and Parquet readers", lambda: _formats(args, results)))
            continue
        if key == IMAGES:
            tasks.append(("images: jaxfeed.ops vs tf.image", lambda: _images(args, peers, results)))
            continue
        if key == SERVICE:
            tasks.append(("service: local vs 1 and 2 Ray workers", lambda: _service(args, results)))
            continue
        if key == "P7":
            results["pipelines"]["P7"] = {
                "title": "P2 via experimental_distribute_dataset on 8 CPU devices (hand loop + device_put)",
                "unit": "row", "runs": {}}
            tasks.append(("P7 jaxfeed.distribute + hand loop", lambda: _p7(args, d, results)))
            continue
        spec = suite.PIPELINES[key]
        entry = results["pipelines"][key] = {
            "title": spec.title, "unit": spec.unit, "runs": {}, "tunable": spec.tunable,
            "element_bytes": spec.element_bytes(sizes), "in_flight_bytes": spec.in_flight(sizes)}
        runs = entry["runs"]
        contenders = {"jaxfeed": (runner.epochs_of(lambda spec=spec: spec.make(d, None)), rows_of),
                      "hand loop": (lambda spec=spec: spec.baseline(d), rows_of)}
        kinds = {"jaxfeed": "jaxfeed", "hand loop": "baseline"}
        if spec.vectorized is not None:
            contenders[VECTORIZED] = (runner.epochs_of(lambda spec=spec: spec.vectorized(d, None)), rows_of)
            kinds[VECTORIZED] = "jaxfeed"
        if spec.as_ported is not None:  # the as-ported targets read the run named here (report.py)
            entry["as_ported"] = "jaxfeed" if spec.as_ported is spec.make else AS_PORTED
            if spec.as_ported is not spec.make:
                contenders[AS_PORTED] = (runner.epochs_of(lambda spec=spec: spec.as_ported(d, None)), rows_of)
                kinds[AS_PORTED] = "jaxfeed"
        for label, make in spec.shown_forms.items():
            contenders[label] = (runner.epochs_of(lambda make=make: make(d, None)), rows_of)
            kinds[label] = "shown"
        for label, make in spec.extra_baselines.items():
            contenders[label] = (lambda make=make: make(d), rows_of)
            kinds[label] = "baseline"
        if key == "P3":
            contenders["raw read()"] = (lambda: suite.baselines.p3_raw_read(d), lambda nbytes: nbytes,
                                        sum(os.path.getsize(f) for f in d.tfrecord_files))
            kinds["raw read()"] = "raw"
            contenders[READ_STAGE] = (runner.epochs_of(lambda: suite.p3_read_stage(d)), rows_of)
            kinds[READ_STAGE] = "read_stage"
        # The AUTOTUNE check times AUTOTUNE and the hand-picked settings in a group of their own: settings
        # that differ by less than this machine's noise are compared run next to run, not across the peers'
        # and hand loops' turns (seconds apart) as in the main group.
        tuning = {}
        if spec.tunable and not args.no_autotune_check:
            tuning[TUNED] = (runner.epochs_of(lambda spec=spec: spec.make(d, None)), rows_of)
            kinds[TUNED] = "tuned"
            for npc in SWEEP:
                label = f"jaxfeed num_parallel_calls={npc}"
                tuning[label] = (runner.epochs_of(lambda spec=spec, npc=npc: spec.make(d, npc)), rows_of)
                kinds[label] = "sweep"

        def local(key=key, runs=runs, contenders=contenders, kinds=kinds, tuning=tuning):
            contenders, kinds, extra = dict(contenders), dict(kinds), {}
            epoch = workloads.epoch_elements(key, sizes)
            servers = [runner.PeerServer(args.peer_python, peer, key, d.path, args.max_seconds) for peer in peers]
            try:
                for server in servers:  # all built before any timing starts: none loads while others run
                    ready = server.ready()
                    if "variants" not in ready:
                        status = "skipped" if "skipped" in ready else "error"
                        runs[server.name] = {"kind": "peer", "status": status, "reason": ready.get(status)}
                        continue
                    for variant, info in ready["variants"].items():
                        label = f"{server.name}: {variant}"
                        contenders[label] = (runner.PeerVariant(server, variant, args.repeats), rows_of)
                        kinds[label], extra[label] = "peer", dict(info, version=ready.get("version"))
                repeats = args.autotune_repeats if tuning else args.repeats
                measured = r.group(contenders, repeats, epoch=epoch)
            finally:
                for server in servers:
                    server.close()
            if tuning:
                measured.update(r.group(tuning, args.autotune_repeats, epoch=epoch))
            for label, res in measured.items():
                runs[label] = dict(res, kind=kinds[label], **extra.get(label, {}))
                if kinds[label] == "raw" and res["status"] == "ok":
                    runs[label]["mb_per_s"] = res["median"] / 1e6
                else:
                    _add_mbps(key, runs[label], sizes)

        tasks.append((f"{key} jaxfeed, hand loop" + (", vectorized" if spec.vectorized else "")
                      + (", as ported" if spec.as_ported not in (None, spec.make) else "")
                      + (", npc sweep" if tuning else "")
                      + (f", {', '.join(peers)}" if peers else ""), local))
        tasks.append((f"{key} jaxfeed peak memory", lambda key=key, entry=entry: _memory(args, d, key, entry)))
    return tasks


def _add_mbps(key, run, sizes):
    if key == "P3" and run.get("status") == "ok":
        run["mb_per_s"] = run["median"] * sizes["p3_bytes"] / 1e6


def _memory(args, d, key, entry):
    from .memory import MARKER

    cmd = [sys.executable, "-m", "jaxfeed.bench.memory", key, os.path.abspath(d.path), "--max-seconds",
           str(args.max_seconds)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tempfile.gettempdir())
    except subprocess.TimeoutExpired:
        entry["memory"] = {"status": "error", "reason": "timed out"}
        return
    line = next((l for l in reversed(proc.stdout.splitlines()) if l.startswith(MARKER)), None)
    entry["memory"] = (json.loads(line[len(MARKER):]) if line else
                       {"status": "error", "reason": f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}"})


def _formats(args, results):
    """The reader section: ``bench/formats.run`` (TFRecord vs raw read(), Parquet vs read_table), here."""
    from . import formats

    mb, rows, repeats = FORMATS_SIZES[args.scale]
    t0 = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="jaxfeed-bench-formats-", dir=args.data_dir) as tmp:
            figures = formats.run(tmp, total_mb=mb, parquet_rows=rows, repeats=repeats)
        figures["status"] = "ok"
    except Exception as e:  # noqa: BLE001 - reported; the rest of the run stands
        missing = runner.missing_part(e)
        figures = {"status": "skipped" if missing else "error", "reason": missing or runner.describe_error(e)}
    figures["sizes"] = {"tfrecord_mb": mb, "parquet_rows": rows, "repeats": repeats}
    figures["seconds"] = round(time.perf_counter() - t0, 1)
    results["formats"] = figures


def _images(args, peers, results):
    """The image section: ``bench/images.run`` (jaxfeed.ops here, tf.image in the peer Python)."""
    from . import images

    count, repeats = IMAGES_SIZES[args.scale]
    try:
        figures = images.run(count, repeats, args.peer_python if "tfdata" in peers else None)
        figures["status"] = "ok"
    except Exception as e:  # noqa: BLE001 - reported; the rest of the run stands
        missing = runner.missing_part(e)
        figures = {"status": "skipped" if missing else "error", "reason": missing or runner.describe_error(e)}
    results["images"] = figures


def _service(args, results):
    """The service section: ``bench/service.run`` in a process of its own (Ray starts and stops there)."""
    count, repeats = SERVICE_SIZES[args.scale]
    cmd = [sys.executable, "-m", "jaxfeed.bench.service", "--images", str(count), "--repeats", str(repeats)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=tempfile.gettempdir())
    except subprocess.TimeoutExpired:
        results["service"] = {"status": "error", "reason": "timed out"}
        return
    if proc.returncode != 0:
        missing = "jaxfeed.service runs on Ray" in proc.stderr
        tail = " | ".join(proc.stderr.strip().splitlines()[-2:])[-300:]
        results["service"] = {"status": "skipped" if missing else "error",
                              "reason": "ray is not installed (pip install jaxfeed[service])" if missing else tail}
        return
    results["service"] = {"status": "ok", **json.loads(proc.stdout[proc.stdout.index("{"):])}


def _p7(args, d, results):
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = "cpu"
    from .distributed import MARKER, XLA_FLAG

    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + XLA_FLAG).strip()
    cmd = [sys.executable, "-m", "jaxfeed.bench.distributed", os.path.abspath(d.path), "--repeats",
           str(args.repeats), "--max-seconds", str(args.max_seconds)]
    runs = results["pipelines"]["P7"]["runs"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, cwd=tempfile.gettempdir())
    except subprocess.TimeoutExpired:
        runs["jaxfeed"] = {"kind": "jaxfeed", "status": "error", "reason": "timed out"}
        return
    line = next((l for l in reversed(proc.stdout.splitlines()) if l.startswith(MARKER)), None)
    if line is None:
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])[-400:]
        runs["jaxfeed"] = {"kind": "jaxfeed", "status": "error", "reason": f"exit {proc.returncode}: {tail}"}
        return
    out = json.loads(line[len(MARKER):])
    runs.update(out["runs"])
    results["pipelines"]["P7"]["devices"] = out.get("devices")
    if "stall" in out:
        results["pipelines"]["P7"]["stall"] = out["stall"]


def _progress(tasks, enabled):
    if not enabled:
        return tasks, None
    try:
        from tqdm import tqdm
    except ImportError:
        return tasks, None
    bar = tqdm(tasks, unit="run", file=sys.stderr, dynamic_ncols=True)
    return bar, bar


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    started = time.time()
    path = data.ensure(args.scale, root=args.data_dir, log=lambda m: print(m, file=sys.stderr))
    d = data.Loaded(path)
    peers = select_peers(args, log=lambda m: print(m, file=sys.stderr))
    results = {"meta": {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "scale": args.scale, "sizes": d.sizes, "repeats": args.repeats,
        "autotune_repeats": args.autotune_repeats, "warmup": 1,
        "max_seconds_per_repeat": args.max_seconds, "cpus": os.cpu_count(), "python": sys.version.split()[0],
        "platform": platform.platform(), "data_dir": path, "tfrecord_writer": d.meta.get("tfrecord_writer"),
        "peers": peers, "peer_python": args.peer_python if peers else None,
    }, "pipelines": {}}
    tasks = plan(args, d, peers, results)
    iterable, bar = _progress(tasks, not args.no_progress)
    for label, task in iterable:
        if bar is not None:
            bar.set_description(label)
        task()
    if bar is not None:
        bar.close()
    for p in results["pipelines"].values():
        if p.get("runs") and all(r.get("status") == "skipped" for k, r in p["runs"].items()
                                 if r.get("kind") == "jaxfeed"):
            p["note"] = "jaxfeed part missing: " + "; ".join(
                r.get("reason", "") for r in p["runs"].values() if r.get("kind") == "jaxfeed")
    results["targets"] = report.compute_targets(results)
    results["meta"]["seconds"] = round(time.time() - started, 1)
    print(report.table(results))
    paths = report.write_all(results, args.out)
    print(f"\nwrote {paths['json']}, {paths['txt']} and {paths['png']} ({results['meta']['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
