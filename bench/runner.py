"""Running measurements: jaxfeed and the hand loops in this process, peers each in a subprocess, all
taking turns repetition by repetition.

Every measurement returns a dict: ``median`` / ``min`` / ``max`` elements per second, ``first_batch_s``,
and ``status`` (``ok``, ``skipped`` with ``reason``, or ``error`` with ``reason``). In-process runs also
carry ``rss_delta``: the peak resident set during the timed repetitions minus the resident set before
them (the kernel's high-water mark is reset first, on Linux).
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback

from . import timing
from .peers import _common
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
        falls on all of them alike; each repetition starts one contender further along, so none always
        runs right after the same one (a peer whose worker processes are still exiting, say).
        ``contenders``: {label: (make_iterable, count)}, where make_iterable may be a ``PeerVariant``
        (timed in its peer's process); ``epoch``: elements in an epoch (to project cut-short runs; see
        ``timing``).

        A missing jaxfeed part (at build time or first use) is a skip; any other failure an error; either
        way the other contenders go on.
        """
        out, reps, rss, first_epoch = {}, {label: [] for label in contenders}, {}, {}
        live = dict(contenders)
        for rep in range(-self.warmup, repeats or self.repeats):
            order = list(live.items())
            turn = max(rep, 0) % max(1, len(order))  # each repetition starts with the next contender: none
            for label, (make, count, *_) in order[turn:] + order[:turn]:  # always follows the same one
                if label not in live:
                    continue
                if getattr(make, "repeats", None) is not None and rep >= make.repeats:
                    continue
                try:
                    if isinstance(make, PeerVariant):  # its memory is another process's
                        run, reset = make.once(), False
                    else:
                        before = timing.rss_bytes()
                        reset = timing.reset_peak_rss()
                        run = timing.once(make, self.max_seconds, count)
                        peak = timing.rss_bytes("VmHWM")
                except Exception as e:  # noqa: BLE001 - one failing pipeline must not stop the suite
                    missing = missing_part(e)
                    out[label] = ({"status": "skipped", "reason": missing} if missing else
                                  {"status": "error", "reason": str(e) if isinstance(e, PeerError)
                                   else describe_error(e)})
                    del live[label]
                    continue
                if rep < 0:
                    if rep == -1:  # the last warm-up: a first epoch (AUTOTUNE tunes from scratch in it)
                        first_epoch[label] = run
                    continue
                reps[label].append(run)
                if reset and before is not None and peak is not None:
                    rss[label] = max(rss.get(label, 0), peak - before)
        for label in live:
            own_epoch = contenders[label][2:]  # (make, count, epoch) overrides the group's epoch
            r = timing.summarize(reps[label], own_epoch[0] if own_epoch else epoch)
            if label in rss:
                r["rss_delta"] = rss[label]
            if label in first_epoch:
                r["first_epoch_rate"] = timing.epoch_rate(first_epoch[label], own_epoch[0] if own_epoch else epoch)
            r["status"] = "ok"
            out[label] = r
        return out


def epochs_of(build):
    """A contender's ``make_iterable`` that builds its Dataset on the first call and returns that one after:
    each repetition is the next epoch of one Dataset, as in a training loop (the peers, too, build once
    and iterate per repetition). A build that fails fails every repetition, as a fresh build would."""
    built = []

    def make():
        if not built:
            built.append(build())
        return built[0]

    return make


# ---------------------------------------------------------------------------------------------- peers
_SHIM = None


def _shim_path() -> str:
    """A folder whose ``jaxfeed`` package holds only ``bench``: the peers import nothing else of jaxfeed,
    and the peer interpreter need not have jaxfeed installed."""
    global _SHIM
    if _SHIM is None:
        root = tempfile.mkdtemp(prefix="jaxfeed-peer-shim-")
        atexit.register(shutil.rmtree, root, True)  # every run left one behind
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


class PeerError(RuntimeError):
    """A peer process failed, exited or did not answer; the message says which and why."""


class PeerServer:
    """One peer on one pipeline in its own process (``peers/_common.py --serve``), timed one repetition at a
    time on request, so that its repetitions can take turns with jaxfeed's in one ``Runner.group``.

    ``ready()`` waits for the pipeline to be built and returns ``{"version", "variants": {name: info}}``,
    or ``{"skipped": why}`` / ``{"error": why}``. stderr goes to a file (a framework's log must not fill
    a pipe nobody reads) whose tail explains an early exit.
    """

    def __init__(self, python, peer, key, datadir, max_seconds=None, module=None):
        self.name, self.key = peer, key
        module = module or f"jaxfeed.bench.peers.{PEERS[peer][0]}"
        cmd = [python, "-m", module, key, os.path.abspath(datadir), "--serve"]
        if max_seconds is not None:
            cmd += ["--max-seconds", str(max_seconds)]
        self._stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                     text=True, env=peer_env(),
                                     cwd=_shim_path())  # not the checkout: its jaxfeed/ would shadow the shim
        self._lines = queue.Queue()
        threading.Thread(target=self._pump, name=f"peer-{peer}-{key}", daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _reply(self, marker, timeout):
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise PeerError(f"{self.name} {self.key}: no answer within {timeout:.0f} s") from None
            if line is None:
                self._stderr.seek(0)
                tail = " | ".join(self._stderr.read().strip().splitlines()[-3:])[-400:]
                raise PeerError(f"{self.name} {self.key}: exit {self.proc.wait()}: {tail}")
            if line.startswith(marker):
                return json.loads(line[len(marker):])

    def ready(self, timeout=300) -> dict:
        try:
            return self._reply(_common.READY, timeout)
        except PeerError as e:
            return {"error": str(e)}

    def once(self, variant, timeout=600) -> dict:
        """One repetition of ``variant`` (``timing.once``'s figures); raises PeerError if it failed."""
        self.proc.stdin.write(variant + "\n")
        self.proc.stdin.flush()
        out = self._reply(_common.RUN, timeout)
        if "error" in out:
            raise PeerError(out["error"])
        return out

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        self._stderr.close()


class PeerVariant:
    """A ``Runner.group`` contender timed in a peer's process: ``once()`` instead of a local iterable;
    ``repeats``: at most this many timed repetitions (the group's first ones), however many the group runs."""

    def __init__(self, server, variant, repeats=None):
        self.server, self.variant, self.repeats = server, variant, repeats

    def once(self) -> dict:
        return self.server.once(self.variant)


def default_peer_python() -> str:
    return os.environ.get("JAXFEED_PEER_PYTHON") or sys.executable


def resolve_python(python: str) -> str:
    """An absolute interpreter path (peers run from another folder, so a relative one would break)."""
    if os.sep in python:
        return os.path.abspath(python)
    return shutil.which(python) or python
