"""What every peer module shares: the command line, timing each variant, printing the JSON result.

Two modes. By default a peer times every variant of the pipelines it is given and prints one result line
(handy by hand). With ``--serve`` it builds one pipeline, says which variants it has, then times one
repetition of a variant each time the bench asks on stdin: the bench interleaves those repetitions with
jaxfeed's own, so a change of machine speed during the run falls on the peers and jaxfeed alike.

A peer module defines ``NAME``, ``version()`` (raises ImportError when its framework is missing) and
``PIPELINES``: ``{"P1": build, ...}`` where ``build(sizes, paths)`` returns
``{variant name: (make_iterable, info dict)}``. ``info`` may say ``python_function: True`` (the variant
runs the same Python function as jaxfeed, for P5's target) and ``crc`` (whether TFRecord CRCs are checked).
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import os
import sys
import time
import traceback

from .. import timing
from ..workloads import data_paths, epoch_elements

MARKER = "JAXFEED_PEER_RESULT "
READY = "JAXFEED_PEER_READY "  # --serve: the pipeline is built; its variants and their info follow
RUN = "JAXFEED_PEER_RUN "  # --serve: one repetition's figures (timing.once), or an error


def main(module, argv=None) -> int:
    p = argparse.ArgumentParser(prog=f"python -m jaxfeed.bench.peers.{module.NAME}")
    p.add_argument("pipelines", help="P1,P2,...")
    p.add_argument("datadir")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--max-seconds", type=float, default=None)
    p.add_argument("--serve", action="store_true",
                   help="build one pipeline, then time one repetition per variant name read from stdin")
    args = p.parse_args(argv)
    if args.serve:
        return serve(module, args)
    out = {"peer": module.NAME, "python": sys.executable, "results": {}}
    try:
        out["version"] = module.version()
    except ImportError as e:
        out["skipped"] = _not_installed(module, e)
        _emit(out)
        return 0
    sizes = _sizes(args.datadir)
    paths = data_paths(args.datadir)
    for key in args.pipelines.split(","):
        build = module.PIPELINES.get(key)
        if build is None:
            out["results"][key] = {"skipped": _unsupported(module, key)}
            continue
        variants = {}
        try:
            built = build(sizes, paths)
        except Exception as e:  # noqa: BLE001 - reported, the other pipelines still run
            out["results"][key] = {"error": _describe(e)}
            continue
        for name, (make, info) in built.items():
            try:
                r = timing.measure(make, repeats=args.repeats, warmup=args.warmup, max_seconds=args.max_seconds,
                                   epoch=epoch_elements(key, sizes))
                r.update(info)
            except Exception as e:  # noqa: BLE001
                r = {"error": _describe(e), **info}
            variants[name] = r
        out["results"][key] = {"variants": variants}
    _emit(out)
    return 0


def serve(module, args) -> int:
    """``--serve``: one READY line, then one RUN line per variant name read from stdin, until EOF."""
    key = args.pipelines
    try:
        version = module.version()
    except ImportError as e:
        _emit({"skipped": _not_installed(module, e)}, READY)
        return 0
    build = module.PIPELINES.get(key)
    if build is None:
        _emit({"skipped": _unsupported(module, key), "version": version}, READY)
        return 0
    try:
        built = build(_sizes(args.datadir), data_paths(args.datadir))
    except Exception as e:  # noqa: BLE001 - reported to the bench, which goes on without this peer
        _emit({"error": _describe(e), "version": version}, READY)
        return 0
    _emit({"version": version, "variants": {name: info for name, (_, info) in built.items()}}, READY)
    for line in sys.stdin:
        name = line.strip()
        if not name:
            continue
        try:
            out = timing.once(built[name][0], args.max_seconds)
        except Exception as e:  # noqa: BLE001 - this variant failed; the bench stops asking for it
            out = {"error": _describe(e)}
        _settle()
        _emit(out, RUN)
    return 0


def _not_installed(module, e: ImportError) -> str:
    return f"{module.NAME}: {e.name or e} is not installed in {sys.executable}"


def _unsupported(module, key) -> str:
    return getattr(module, "UNSUPPORTED", {}).get(key, f"no {module.NAME} version of {key} in this bench")


def _sizes(datadir) -> dict:
    with open(os.path.join(datadir, "meta.json")) as f:
        return json.load(f)["sizes"]


def _settle(timeout=5.0):
    """After a repetition, before answering: collect the iterator and wait for its worker processes to exit,
    so they do not run on into the next contender's repetition."""
    gc.collect()
    deadline = time.monotonic() + timeout
    while multiprocessing.active_children() and time.monotonic() < deadline:  # (also joins the exited)
        time.sleep(0.01)


def _describe(e) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    where = f" at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno}" if tb else ""
    return f"{type(e).__name__}: {str(e)[:300]}{where}"


def _emit(out, marker=MARKER):
    sys.stdout.write(marker + json.dumps(out) + "\n")
    sys.stdout.flush()
