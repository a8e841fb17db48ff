"""What every peer module shares: the command line, timing each variant, printing the JSON result.

A peer module defines ``NAME``, ``version()`` (raises ImportError when its framework is missing) and
``PIPELINES``: ``{"P1": build, ...}`` where ``build(sizes, paths)`` returns
``{variant name: (make_iterable, info dict)}``. ``info`` may say ``python_function: True`` (the variant
runs the same Python function as jaxfeed, for P5's target) and ``crc`` (whether TFRecord CRCs are checked).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback

from .. import timing
from ..workloads import data_paths, epoch_elements

MARKER = "JAXFEED_PEER_RESULT "


def main(module, argv=None) -> int:
    p = argparse.ArgumentParser(prog=f"python -m jaxfeed.bench.peers.{module.NAME}")
    p.add_argument("pipelines", help="P1,P2,...")
    p.add_argument("datadir")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--max-seconds", type=float, default=None)
    args = p.parse_args(argv)
    out = {"peer": module.NAME, "python": sys.executable, "results": {}}
    try:
        out["version"] = module.version()
    except ImportError as e:
        out["skipped"] = f"{module.NAME}: {e.name or e} is not installed in {sys.executable}"
        _emit(out)
        return 0
    with open(os.path.join(args.datadir, "meta.json")) as f:
        sizes = json.load(f)["sizes"]
    paths = data_paths(args.datadir)
    for key in args.pipelines.split(","):
        build = module.PIPELINES.get(key)
        if build is None:
            out["results"][key] = {"skipped": getattr(module, "UNSUPPORTED", {}).get(
                key, f"no {module.NAME} version of {key} in this bench")}
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


def _describe(e) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    where = f" at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno}" if tb else ""
    return f"{type(e).__name__}: {str(e)[:300]}{where}"


def _emit(out):
    sys.stdout.write(MARKER + json.dumps(out) + "\n")
    sys.stdout.flush()
