"""Running measurements: jaxfeed and the hand loops in this process, peers each in a subprocess.

Every measurement returns a dict: ``median`` / ``min`` / ``max`` elements per second, ``first_batch_s``,
and ``status`` (``ok``, ``skipped`` with ``reason``, or ``error`` with ``reason``). In-process runs also
carry ``rss_delta``: the peak resident set during the timed repetitions minus the resident set before
them (the kernel's high-water mark is reset first, on Linux).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

from . import timing
from .suite import Unavailable
from .workloads import rows_of

PEERS = {"tfdata": ("tfdata", "tensorflow"), "torch": ("torch_loader", "torch"), "grain": ("grain_peer", "grain")}
BENCH_DIR = os.path.dirname(os.path.abspath(__file__))


def describe_error(e) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    where = f" (at {os.path.basename(tb[-1].filename)}:{tb[-1].lineno})" if tb else ""
    return f"{type(e).__name__}: {str(e)[:300]}{where}"


def missing_part(e) -> str | None:
    """The jaxfeed part a failure says is missing (a module or name not written yet), else None."""
    if isinstance(e, Unavailable):
        return str(e)
    if isinstance(e, ModuleNotFoundError) and (e.name or "").startswith("jaxfeed"):
        return f"{e.name} does not exist yet"
    if isinstance(e, ImportError) and "jaxfeed" in str(e):
        return str(e)
    return None


class Runner:
    def __init__(self, repeats=5, warmup=1, max_seconds=None):
        self.repeats = repeats
        self.warmup = warmup
        self.max_seconds = max_seconds

    def local(self, make_iterable, count=rows_of, repeats=None, epoch=None):
        """Time one pipeline here (see ``group``)."""
        return self.group({"x": (make_iterable, count)}, repeats, epoch)["x"]

    def group(self, contenders, repeats=None, epoch=None):
        """Time several pipelines here, interleaved: after one warm-up each, repetition i of every
        contender runs before repetition i + 1 of any, so a change of machine load (other processes)
        falls on all of them alike. ``contenders``: {label: (make_iterable, count)}; ``epoch``: elements
        in an epoch (to project cut-short runs; see ``timing``).

        A missing jaxfeed part (at build time or first use) is a skip; any other failure an error; either
        way the other contenders go on.
        """
        out, reps, rss = {}, {label: [] for label in contenders}, {}
        live = dict(contenders)
        for rep in range(-self.warmup, repeats or self.repeats):
            for label, (make, count, *_) in list(live.items()):
                try:
                    before = timing.rss_bytes()
                    reset = timing.reset_peak_rss()
                    run = timing.once(make, self.max_seconds, count)
                    peak = timing.rss_bytes("VmHWM")
                except Exception as e:  # noqa: BLE001 - one failing pipeline must not stop the suite
                    missing = missing_part(e)
                    out[label] = ({"status": "skipped", "reason": missing} if missing else
                                  {"status": "error", "reason": describe_error(e)})
                    del live[label]
                    continue
                if rep < 0:
                    continue
                reps[label].append(run)
                if reset and before is not None and peak is not None:
                    rss[label] = max(rss.get(label, 0), peak - before)
        for label in live:
            own_epoch = contenders[label][2:]  # (make, count, epoch) overrides the group's epoch
            r = timing.summarize(reps[label], own_epoch[0] if own_epoch else epoch)
            if label in rss:
                r["rss_delta"] = rss[label]
            r["status"] = "ok"
            out[label] = r
        return out


# ---------------------------------------------------------------------------------------------- peers
_SHIM = None


def _shim_path() -> str:
    """A folder whose ``jaxfeed`` package holds only ``bench``: the peers import nothing else of jaxfeed,
    and the peer interpreter need not have jaxfeed installed."""
    global _SHIM
    if _SHIM is None:
        root = tempfile.mkdtemp(prefix="jaxfeed-peer-shim-")
        os.makedirs(os.path.join(root, "jaxfeed"))
        with open(os.path.join(root, "jaxfeed", "__init__.py"), "w") as f:
            f.write('"""Only jaxfeed.bench, for peer processes."""\n')
        os.symlink(BENCH_DIR, os.path.join(root, "jaxfeed", "bench"))
        _SHIM = root
    return _SHIM


def peer_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = _shim_path() + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.pop("XLA_FLAGS", None)
    return env


def probe_peers(python, names) -> dict:
    """{peer: version or None} for the given interpreter, without importing the frameworks."""
    code = ("import importlib.util, importlib.metadata, json, sys\n"
            "out = {}\n"
            "for peer, dist in json.loads(sys.argv[1]).items():\n"
            "    ok = importlib.util.find_spec(dist) is not None\n"
            "    v = None\n"
            "    if ok:\n"
            "        for d in (dist, dist + '-cpu'):\n"
            "            try: v = importlib.metadata.version(d); break\n"
            "            except Exception: pass\n"
            "    out[peer] = (v or 'installed') if ok else None\n"
            "print(json.dumps(out))\n")
    query = {n: PEERS[n][1] for n in names}
    try:
        proc = subprocess.run([python, "-c", code, json.dumps(query)], capture_output=True, text=True,
                              timeout=60)
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return {n: None for n in names}


def run_peer(python, peer, key, datadir, repeats, warmup, max_seconds, timeout=600) -> dict:
    """Run one peer on one pipeline in its own process; {variant: measurement} or a skip/error entry."""
    module = PEERS[peer][0]
    cmd = [python, "-m", f"jaxfeed.bench.peers.{module}", key, os.path.abspath(datadir), "--repeats", str(repeats),
           "--warmup", str(warmup)]
    if max_seconds is not None:
        cmd += ["--max-seconds", str(max_seconds)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=peer_env(), timeout=timeout,
                              cwd=_shim_path())  # not the checkout: its jaxfeed/ would shadow the shim
    except subprocess.TimeoutExpired:
        return {"status": "error", "reason": f"timed out after {timeout} s"}
    line = next((l for l in reversed(proc.stdout.splitlines()) if l.startswith("JAXFEED_PEER_RESULT ")), None)
    if line is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"status": "error", "reason": f"exit {proc.returncode}: " + " | ".join(tail)[-400:]}
    out = json.loads(line[len("JAXFEED_PEER_RESULT "):])
    if "skipped" in out:
        return {"status": "skipped", "reason": out["skipped"]}
    res = out["results"].get(key, {})
    res["version"] = out.get("version")
    res["process_seconds"] = round(time.perf_counter() - t0, 2)
    if "skipped" in res:
        res["status"] = "skipped"
        res["reason"] = res.pop("skipped")
    elif "error" in res:
        res["status"] = "error"
        res["reason"] = res.pop("error")
    else:
        res["status"] = "ok"
        for v in res["variants"].values():
            v["status"] = "error" if "error" in v else "ok"
            if "error" in v:
                v["reason"] = v.pop("error")
    return res


def default_peer_python() -> str:
    return os.environ.get("JAXFEED_PEER_PYTHON") or sys.executable


def resolve_python(python: str) -> str:
    """An absolute interpreter path (peers run from another folder, so a relative one would break)."""
    if os.sep in python:
        return os.path.abspath(python)
    return shutil.which(python) or python
